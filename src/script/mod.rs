//! The Lua engine behind `EVAL`: Lua 5.1 as Redis embeds it (the `mlua`
//! crate, Lua compiled in), sandboxed as Redis 7.0 sandboxes it, with the
//! `redis` library and the four libraries Redis loads (`cjson`, `cmsgpack`,
//! `struct`, `bit`; `libs/`, in Rust, each refusing bad input with an
//! error, never a crash).
//!
//! The engine knows nothing of commands or keys: `redis.call` goes to a
//! [`Host`] the command layer provides (`cmd/script.rs`), which runs the
//! command and writes its reply as RESP; the engine reads that reply back
//! into Lua (`convert.rs`), and writes the script's result for the client.
//!
//! Scripts are cached by SHA1 and shared by every connection, as in Redis;
//! the Lua states that run them are a small pool, one per worker thread
//! (and one spare), so two workers never queue for one state: a script
//! is stateless between runs (the sandbox protects the globals), so which
//! state runs it is invisible to it. Each state compiles a cached script
//! the first time it runs it. A hook every [`HOOK_EVERY`] instructions
//! notices a script past the busy threshold (other clients then get
//! `BUSY`) and stops one that `SCRIPT KILL` asked to stop, or that its
//! host wants to run again over every shard.

mod call;
mod convert;
mod libs;
mod vm;

use vm::{errtext, CallCtx, Outcome, Vm};

use std::collections::HashMap;
use std::ops::Range;
use std::ptr::NonNull;

use bytes::BytesMut;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use parking_lot::{ReentrantMutex, ReentrantMutexGuard, RwLock};
use std::cell::RefCell;

use crate::protocol::{Protocol, ReplyBuf, Request};

/// Scripts cached by `EVAL` (not `SCRIPT LOAD`) kept at most: past it the
/// least recently used one is forgotten, as Redis 7.4 does, so clients
/// that build a new script text per call (a value spliced into the body)
/// cannot grow the cache and the Lua heaps without bound. An evicted
/// script's `EVALSHA` answers `NOSCRIPT`, and clients send `EVAL` again.
pub const EVAL_SCRIPTS_MAX: usize = 500;

/// Runs between two steps of a state's collector (Redis's
/// `LUA_GC_CYCLE_PERIOD`).
const GC_EVERY: u32 = 50;

/// Instructions between two looks at the clock and the kill flag: about a
/// millisecond of Lua, and no measurable cost.
pub const HOOK_EVERY: u32 = 100_000;

/// What `SCRIPT KILL` makes a script raise (Redis's words).
const KILLED: &str = "Script killed by user with SCRIPT KILL...";

/// A script that has run this long hands its worker's other tasks to
/// another thread (see [`Running::hand_off`]): no rate-limiter script runs
/// anywhere near this long, so only runaway ones pay for it.
const HANDOFF_AFTER: Duration = Duration::from_millis(10);

/// How long a hand-off waits for another thread to take the worker's
/// tasks.
const HANDOFF_WAIT: Duration = Duration::from_millis(2);

/// A wait for the Lua state shorter than this stays on its thread.
const SHORT_WAIT: Duration = Duration::from_micros(50);

/// How the engine waits for the Lua state while another script holds it
/// long (see `store::Blocking`).
pub type Blocking = fn(&mut dyn FnMut());

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Run time past which a script is busy (Redis's
    /// `busy-reply-threshold`).
    pub busy_threshold: Duration,
    /// Cap on each Lua state's heap, in bytes.
    pub memory_limit: usize,
    /// Lua states in the pool: the worker threads, and one more.
    pub states: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            busy_threshold: Duration::from_secs(5),
            memory_limit: 256 << 20,
            states: 3,
        }
    }
}

/// What a script's shebang line (`#!lua flags=...`) declares.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ScriptFlags {
    /// The script has a shebang line (Redis then checks its flags up
    /// front; without one, every command it calls is checked).
    pub shebang: bool,
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot_keys: bool,
}

/// A compiled script in the cache.
#[derive(Clone, Debug)]
pub struct Script(Arc<ScriptInner>);

#[derive(Debug)]
struct ScriptInner {
    sha: [u8; 40],
    /// The text, for the states that have not compiled it yet.
    body: Box<[u8]>,
    flags: ScriptFlags,
    /// A run of it reached a key it did not declare: later runs keep what
    /// they overwrite, so that they can be stopped and run again even
    /// after writing (`cmd::script`).
    undeclared: AtomicBool,
    /// `SCRIPT LOAD` cached it: it stays until `SCRIPT FLUSH`. Scripts
    /// only `EVAL` cached are evicted, least recently used first, past
    /// [`EVAL_SCRIPTS_MAX`].
    loaded: AtomicBool,
    /// The engine's tick when it last ran or was cached (see `Engine::tick`).
    used: AtomicU64,
}

impl Script {
    /// The SHA1 of its text, 40 lower-case hex digits.
    pub fn sha(&self) -> &str {
        std::str::from_utf8(&self.0.sha).unwrap_or_default()
    }

    pub fn flags(&self) -> ScriptFlags {
        self.0.flags
    }

    /// Whether a run of it reached a key it did not declare.
    pub fn undeclared(&self) -> bool {
        self.0.undeclared.load(Ordering::Relaxed)
    }

    /// Remembers that a run of it reached a key it did not declare.
    pub fn mark_undeclared(&self) {
        self.0.undeclared.store(true, Ordering::Relaxed);
    }
}

/// Why a script did not give a reply. `Display` is the whole Redis error
/// line, without the leading `-`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("NOSCRIPT No matching script. Please use EVAL.")]
    NoScript,
    #[error("ERR Error compiling script (new function): {0}")]
    Compile(String),
    /// A shebang Redis would refuse; the text is Redis's whole line.
    #[error("{0}")]
    Shebang(String),
    /// The script raised; the text is the whole error line.
    #[error("{0}")]
    Runtime(String),
    /// `SCRIPT KILL` stopped it; the text is the whole error line.
    #[error("{0}")]
    Killed(String),
    #[error("ERR The script used more than the Lua heap's limit of memory, and was stopped")]
    OutOfMemory,
    /// The host stopped it to run it again (it wrote nothing).
    #[error("ERR script stopped to run again")]
    Aborted,
}

/// Why `SCRIPT KILL` could not stop a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillError {
    NotBusy,
    /// It has written: stopping it would leave half its writes.
    Unkillable,
}

/// What a command run for `redis.call` did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Call {
    /// It changed the keyspace (the script can no longer be killed).
    pub wrote: bool,
    /// The host cannot let the script go on: stop it now, with no further
    /// call (`run` then answers [`ScriptError::Aborted`]).
    pub abort: bool,
}

/// Where `redis.call` goes: the command layer.
pub trait Host {
    /// Runs `req` (its first argument is the command name, in any case)
    /// and writes its reply, in protocol `resp`, to `reply`: a refusal or a
    /// command's error as an error reply.
    fn call(&mut self, req: &Request<'_>, resp: Protocol, reply: &mut ReplyBuf) -> Call;

    /// Whether `name` is a command (`redis.acl_check_cmd`).
    fn known(&mut self, name: &[u8]) -> bool;
}

/// The SHA1 of `body` as 40 lower-case hex digits.
pub fn sha1hex(body: &[u8]) -> [u8; 40] {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, body);
    let mut out = [0u8; 40];
    for (i, b) in digest.as_ref().iter().enumerate() {
        out[2 * i] = b"0123456789abcdef"[(b >> 4) as usize];
        out[2 * i + 1] = b"0123456789abcdef"[(b & 15) as usize];
    }
    out
}

/// A SHA1 as a client wrote it, lower-cased, if it has the length of one.
fn sha_key(sha: &[u8]) -> Option<[u8; 40]> {
    let mut key: [u8; 40] = sha.try_into().ok()?;
    key.make_ascii_lowercase();
    Some(key)
}

/// State the hook and `SCRIPT KILL` share with the running script.
#[derive(Debug)]
struct Running {
    base: Instant,
    /// Nanoseconds after `base` the running script started.
    started: AtomicU64,
    running: AtomicBool,
    busy: AtomicBool,
    kill: AtomicBool,
    /// The host asked to stop (to run again over every shard).
    abort: AtomicBool,
    wrote: AtomicBool,
    threshold_ms: AtomicU64,
    /// How a long wait is moved off the async worker (see [`Blocking`]).
    blocking: OnceLock<Blocking>,
    /// This run has handed its worker's other tasks to another thread.
    handed_off: AtomicBool,
    /// This run's error (raised, or returned as `{err = ...}`) is a
    /// command's, counted when the command failed.
    counted: AtomicBool,
}

impl Running {
    /// Whether the script must stop now. A kill (`SCRIPT KILL`, shutdown)
    /// that arrives while a command of the script writes is not obeyed:
    /// `wrote` is set by this thread right after that command, so a
    /// script is never stopped with half its writes done.
    fn stopping(&self) -> bool {
        (self.kill.load(Ordering::Relaxed) && !self.wrote.load(Ordering::Relaxed))
            || self.abort.load(Ordering::Relaxed)
    }

    /// A script this long keeps its thread a while: the tasks queued on
    /// that async worker (other clients, the socket poller) are handed to
    /// another thread instead of waiting for the script to end. The
    /// runtime moves them while this thread waits inside the blocking
    /// section; [`HANDOFF_WAIT`] gives the new thread time to take them,
    /// after which the script goes on without them.
    fn hand_off(&self) {
        if let Some(wait) = self.blocking.get() {
            wait(&mut || std::thread::sleep(HANDOFF_WAIT));
        }
    }

    /// The hook: notes a script past the threshold, stops a killed one.
    fn check(&self) -> mlua::Result<VmState> {
        if !self.running.load(Ordering::Relaxed) {
            return Ok(VmState::Continue);
        }
        let ran = self.base.elapsed().as_nanos() as u64 - self.started.load(Ordering::Relaxed);
        if ran >= HANDOFF_AFTER.as_nanos() as u64 && !self.handed_off.swap(true, Ordering::Relaxed)
        {
            self.hand_off();
        }
        let threshold = self
            .threshold_ms
            .load(Ordering::Relaxed)
            .saturating_mul(1_000_000);
        // Other clients must now be answered BUSY: make sure this thread's
        // worker role has moved on (a second try).
        if ran >= threshold && !self.busy.swap(true, Ordering::Relaxed) {
            self.hand_off();
        }
        if self.stopping() {
            return Err(mlua::Error::RuntimeError(KILLED.into()));
        }
        Ok(VmState::Continue)
    }
}

/// One Lua state of the pool, and what its hook and `SCRIPT KILL` share.
///
/// Re-entrant, so a thread that [reserved](Engine::reserve) a state before
/// it took shard locks always gets one again without waiting (see there).
struct Slot {
    /// None until a script first needs it, and again after `SCRIPT FLUSH`
    /// (as Redis starts a new Lua state): states no client uses take no
    /// memory.
    vm: ReentrantMutex<RefCell<Option<Vm>>>,
    run: Arc<Running>,
    /// Bytes its heap held after its last script.
    memory: AtomicUsize,
    /// Scripts evicted from the cache whose compiled functions this state
    /// still holds: dropped when it is next taken.
    evicted: parking_lot::Mutex<Vec<[u8; 40]>>,
    has_evicted: AtomicBool,
}

/// The script engine: the pool of Lua states, the script cache.
pub struct Engine {
    slots: Box<[Slot]>,
    /// What each state is made with, when first needed.
    cfg: EngineConfig,
    cache: RwLock<Cache>,
    /// Moves with every script cached; a script's `used` is the tick of
    /// its last run, which orders scripts for eviction to within one
    /// caching. Runs only read it: a counter every run moved would be one
    /// more cache line two workers bounce per script.
    tick: AtomicU64,
    /// Scripts evicted since start (`INFO`'s `evicted_scripts`).
    evictions: AtomicU64,
    blocking: OnceLock<Blocking>,
    /// Moved by `SCRIPT FLUSH`: a state whose functions are of an older
    /// generation drops them when next taken.
    generation: AtomicU64,
}

/// The script cache: every script by SHA1, and how many of them only
/// `EVAL` cached (the evictable ones).
#[derive(Default)]
struct Cache {
    scripts: HashMap<[u8; 40], Script>,
    evictable: usize,
}

/// A Lua state held by this thread: see [`Engine::reserve`].
pub struct Reserved<'e> {
    engine: &'e Engine,
    slot: &'e Slot,
    guard: VmGuard<'e>,
}

type VmGuard<'e> = ReentrantMutexGuard<'e, RefCell<Option<Vm>>>;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("scripts", &self.len())
            .field("states", &self.slots.len())
            .finish()
    }
}

/// The pool slot a thread tries first: threads are numbered as they first
/// run a script, so each worker keeps to its own state.
fn home_slot(n: usize) -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: Cell<Option<usize>> = const { Cell::new(None) };
    }
    HOME.with(|h| {
        let i = h.get().unwrap_or_else(|| {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            h.set(Some(i));
            i
        });
        i % n
    })
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        let threshold_ms = cfg.busy_threshold.as_millis() as u64;
        let slots = (0..cfg.states.max(1))
            .map(|_| {
                let run = Arc::new(Running {
                    base: Instant::now(),
                    started: AtomicU64::new(0),
                    running: AtomicBool::new(false),
                    busy: AtomicBool::new(false),
                    kill: AtomicBool::new(false),
                    abort: AtomicBool::new(false),
                    wrote: AtomicBool::new(false),
                    threshold_ms: AtomicU64::new(threshold_ms),
                    blocking: OnceLock::new(),
                    handed_off: AtomicBool::new(false),
                    counted: AtomicBool::new(false),
                });
                Slot {
                    memory: AtomicUsize::new(0),
                    vm: ReentrantMutex::new(RefCell::new(None)),
                    run,
                    evicted: parking_lot::Mutex::new(Vec::new()),
                    has_evicted: AtomicBool::new(false),
                }
            })
            .collect();
        Engine {
            slots,
            cfg,
            cache: RwLock::new(Cache::default()),
            tick: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            blocking: OnceLock::new(),
            generation: AtomicU64::new(0),
        }
    }

    /// Sets how long waits for a Lua state are made; once.
    pub fn set_blocking(&self, wait: Blocking) {
        let _ = self.blocking.set(wait);
        for s in self.slots.iter() {
            let _ = s.run.blocking.set(wait);
        }
    }

    /// `--lua-time-limit` as it is now.
    pub fn set_busy_threshold(&self, d: Duration) {
        for s in self.slots.iter() {
            s.run
                .threshold_ms
                .store(d.as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// Takes a state of the pool for this thread, to hold while it takes
    /// shard locks and runs a script (`EVAL`, or `EXEC` of a queue with
    /// one). Every later [`Engine::lock`] on this thread then finds a
    /// state at once (the reserved one, re-entered, if none is free). It
    /// breaks the cycle that otherwise forms when shard waits move script
    /// runs onto more threads than there are states: a run that holds
    /// shards waiting for a state, while the states' holders wait for
    /// those shards. The wait for a state happens here, holding nothing.
    pub fn reserve(&self) -> Reserved<'_> {
        let (slot, guard) = self.lock();
        Reserved {
            engine: self,
            slot,
            guard,
        }
    }

    /// A state of the pool: this thread's own if free (or reserved by this
    /// thread), else any free one, else (every state running a script) a
    /// wait for this thread's own. Functions of a flushed generation are
    /// dropped first.
    fn lock(&self) -> (&Slot, VmGuard<'_>) {
        let n = self.slots.len();
        let home = home_slot(n);
        for i in 0..n {
            let slot = &self.slots[(home + i) % n];
            if let Some(g) = slot.vm.try_lock() {
                return (slot, self.fresh(slot, g));
            }
        }
        let slot = &self.slots[home];
        (slot, self.lock_slot(slot))
    }

    fn lock_slot<'s>(&self, slot: &'s Slot) -> VmGuard<'s> {
        if let Some(g) = slot.vm.try_lock_for(SHORT_WAIT) {
            return self.fresh(slot, g);
        }
        let g = match self.blocking.get() {
            Some(wait) => {
                let mut got = None;
                wait(&mut || got = Some(slot.vm.lock()));
                got.unwrap_or_else(|| slot.vm.lock())
            }
            None => slot.vm.lock(),
        };
        self.fresh(slot, g)
    }

    /// Drops a state if `SCRIPT FLUSH` ran since it last ran (the next
    /// script gets a new one, as in Redis), and the functions of scripts
    /// evicted meanwhile.
    fn fresh<'s>(&self, slot: &Slot, g: VmGuard<'s>) -> VmGuard<'s> {
        let generation = self.generation.load(Ordering::Acquire);
        if let Ok(mut cell) = g.try_borrow_mut() {
            if slot.has_evicted.swap(false, Ordering::AcqRel) {
                let evicted = std::mem::take(&mut *slot.evicted.lock());
                if let Some(vm) = cell.as_mut() {
                    for sha in evicted {
                        vm.functions.remove(&sha);
                    }
                }
            }
            if cell.as_ref().is_some_and(|vm| vm.generation != generation) {
                *cell = None;
                slot.memory.store(0, Ordering::Relaxed);
            }
        }
        g
    }

    /// The slot's state, made now if it has none.
    fn state<'g>(
        &self,
        slot: &Slot,
        cell: &'g RefCell<Option<Vm>>,
    ) -> Result<std::cell::RefMut<'g, Vm>, ScriptError> {
        let mut opt = cell.borrow_mut();
        if opt.is_none() {
            let mut vm = Vm::new(&self.cfg, slot.run.clone()).map_err(|e| {
                ScriptError::Runtime(format!("ERR cannot start a Lua state: {}", errtext(&e)))
            })?;
            vm.generation = self.generation.load(Ordering::Acquire);
            slot.memory.store(vm.lua.used_memory(), Ordering::Relaxed);
            *opt = Some(vm);
        }
        std::cell::RefMut::filter_map(opt, Option::as_mut)
            .map_err(|_| ScriptError::Runtime("ERR no Lua state".into()))
    }

    /// Compiles and caches `body` for `EVAL`; a body cached already is not
    /// compiled again. Evictable (see [`EVAL_SCRIPTS_MAX`]).
    pub fn prepare(&self, body: &[u8]) -> Result<Script, ScriptError> {
        self.cache_body(body, false)
    }

    /// `SCRIPT LOAD`: compiles and caches `body` until `SCRIPT FLUSH`.
    pub fn load(&self, body: &[u8]) -> Result<Script, ScriptError> {
        self.cache_body(body, true)
    }

    fn cache_body(&self, body: &[u8], loaded: bool) -> Result<Script, ScriptError> {
        let sha = sha1hex(body);
        if let Some(s) = self.cached(&sha, loaded) {
            return Ok(s);
        }
        let flags = parse_shebang(body)?;
        let (slot, guard) = self.lock();
        let mut vm = self.state(slot, &guard)?;
        if let Some(s) = self.cached(&sha, loaded) {
            return Ok(s);
        }
        let f = vm.compile(body, flags.shebang)?;
        vm.functions.insert(sha, f);
        slot.memory.store(vm.lua.used_memory(), Ordering::Relaxed);
        let script = Script(Arc::new(ScriptInner {
            sha,
            body: body.into(),
            flags,
            undeclared: AtomicBool::new(false),
            loaded: AtomicBool::new(loaded),
            used: AtomicU64::new(self.tick.fetch_add(1, Ordering::Relaxed)),
        }));
        let mut cache = self.cache.write();
        if !loaded {
            if cache.evictable >= EVAL_SCRIPTS_MAX {
                self.evict_one(&mut cache);
            }
            cache.evictable += 1;
        }
        cache.scripts.insert(sha, script.clone());
        Ok(script)
    }

    /// The cached script of `sha`, marked used (and kept for good, if
    /// `loaded`).
    fn cached(&self, sha: &[u8; 40], loaded: bool) -> Option<Script> {
        let script = self.cache.read().scripts.get(sha).cloned()?;
        self.touch(&script);
        if loaded && !script.0.loaded.load(Ordering::Relaxed) {
            let mut cache = self.cache.write();
            if !script.0.loaded.swap(true, Ordering::Relaxed) {
                cache.evictable -= 1;
            }
        }
        Some(script)
    }

    /// Marks `script` as just used; written only when the tick moved
    /// since its last run, so a hot script's line is mostly only read.
    fn touch(&self, script: &Script) {
        let tick = self.tick.load(Ordering::Relaxed);
        if script.0.used.load(Ordering::Relaxed) != tick {
            script.0.used.store(tick, Ordering::Relaxed);
        }
    }

    /// Forgets the least recently used script that only `EVAL` cached: a
    /// walk over the cache, once per script cached past the bound. The
    /// states drop its function when next taken.
    fn evict_one(&self, cache: &mut Cache) {
        let oldest = cache
            .scripts
            .values()
            .filter(|s| !s.0.loaded.load(Ordering::Relaxed))
            .min_by_key(|s| s.0.used.load(Ordering::Relaxed))
            .map(|s| s.0.sha);
        let Some(sha) = oldest else { return };
        cache.scripts.remove(&sha);
        cache.evictable -= 1;
        self.evictions.fetch_add(1, Ordering::Relaxed);
        for slot in self.slots.iter() {
            slot.evicted.lock().push(sha);
            slot.has_evicted.store(true, Ordering::Release);
        }
    }

    /// Scripts evicted since start.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// The cached script of `sha` (any case), if there is one, marked used.
    pub fn get(&self, sha: &[u8]) -> Option<Script> {
        let script = self.cache.read().scripts.get(&sha_key(sha)?).cloned()?;
        self.touch(&script);
        Some(script)
    }

    pub fn exists(&self, sha: &[u8]) -> bool {
        sha_key(sha).is_some_and(|k| self.cache.read().scripts.contains_key(&k))
    }

    /// `SCRIPT FLUSH`: forgets every script and gives their memory back,
    /// in every state: at once in those that are free, when next taken in
    /// those running a script (waiting for them could deadlock: `EXEC`
    /// may hold shards their scripts wait for).
    pub fn flush(&self) {
        let mut cache = self.cache.write();
        cache.scripts.clear();
        cache.evictable = 0;
        self.generation.fetch_add(1, Ordering::AcqRel);
        drop(cache);
        for slot in self.slots.iter() {
            if let Some(g) = slot.vm.try_lock() {
                drop(self.fresh(slot, g));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.cache.read().scripts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the Lua heaps held after their last scripts, summed.
    pub fn used_memory(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.memory.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether a script has run past the busy threshold and still runs.
    pub fn busy(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.run.busy.load(Ordering::Relaxed))
    }

    pub fn running(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.run.running.load(Ordering::Relaxed))
    }

    /// Shutdown's stop: every running script is told to stop, busy or not
    /// (its client gets `SCRIPT KILL`'s error, and nothing is lost). One
    /// that has written does not obey ([`Running::stopping`]): stopping it
    /// would leave half its writes, so shutdown waits for it instead.
    pub fn stop_for_shutdown(&self) {
        for s in self.slots.iter() {
            if s.run.running.load(Ordering::Relaxed) {
                s.run.kill.store(true, Ordering::Relaxed);
            }
        }
    }

    /// `SCRIPT KILL`: stops every busy script that has not written.
    pub fn kill(&self) -> Result<(), KillError> {
        let mut busy = false;
        let mut killed = false;
        for s in self.slots.iter() {
            let run = &s.run;
            if !run.busy.load(Ordering::Relaxed) {
                continue;
            }
            busy = true;
            if !run.wrote.load(Ordering::Relaxed) {
                run.kill.store(true, Ordering::Relaxed);
                killed = true;
            }
        }
        match (busy, killed) {
            (false, _) => Err(KillError::NotBusy),
            (true, false) => Err(KillError::Unkillable),
            (true, true) => Ok(()),
        }
    }
}

impl Reserved<'_> {
    /// Whether the last run's error reply (raised, or returned) is a
    /// command's error that the command layer counted already.
    pub fn error_counted(&self) -> bool {
        self.slot.run.counted.load(Ordering::Relaxed)
    }

    /// Runs `script` on this reserved state, with `keys` and `args`, and
    /// writes its result to `out` for a client speaking `resp`.
    pub fn run<'k>(
        &self,
        script: &Script,
        keys: impl ExactSizeIterator<Item = &'k [u8]>,
        args: impl ExactSizeIterator<Item = &'k [u8]>,
        resp: Protocol,
        host: &mut dyn Host,
        out: &mut ReplyBuf,
    ) -> Result<(), ScriptError> {
        let slot = self.slot;
        let mut vm = self.engine.state(slot, &self.guard)?;
        let sha = &script.0.sha;
        if !vm.functions.contains_key(sha) {
            // Not yet run in this state: compiled from the cached text,
            // unless `SCRIPT FLUSH` has forgotten it meanwhile.
            if !self.engine.cache.read().scripts.contains_key(sha) {
                return Err(ScriptError::NoScript);
            }
            let f = vm.compile(&script.0.body, script.0.flags.shebang)?;
            vm.functions.insert(*sha, f);
        }
        let vm = &*vm;
        let f = vm.functions.get(sha).expect("compiled above");
        let run = &*slot.run;
        run.started
            .store(run.base.elapsed().as_nanos() as u64, Ordering::Relaxed);
        for flag in [
            &run.busy,
            &run.kill,
            &run.abort,
            &run.wrote,
            &run.handed_off,
            &run.counted,
        ] {
            flag.store(false, Ordering::Relaxed);
        }
        run.running.store(true, Ordering::Relaxed);
        let result = vm.run(f, keys, args, resp, host, out);
        if matches!(
            result,
            Err(mlua::Error::MemoryError(_)) | Ok(Outcome::OutOfMemory)
        ) {
            // What the failed script built is garbage now: collect it, so
            // the next script starts under the cap.
            let _ = vm.lua.gc_collect();
            let _ = vm.lua.gc_collect();
        }
        run.running.store(false, Ordering::Relaxed);
        run.busy.store(false, Ordering::Relaxed);
        // A step of the collector every GC_EVERY runs, as Redis takes one,
        // so a state's garbage stays near what its scripts keep.
        let runs = vm.runs.get().wrapping_add(1);
        vm.runs.set(runs);
        if runs % GC_EVERY == 0 {
            let _ = vm.lua.gc_step();
        }
        slot.memory.store(vm.lua.used_memory(), Ordering::Relaxed);
        let sha = script.sha();
        match result {
            Ok(Outcome::Reply) => Ok(()),
            Ok(Outcome::Raised { err, source, line }) => {
                if run.abort.load(Ordering::Relaxed) {
                    return Err(ScriptError::Aborted);
                }
                let text = format!("{err} script: {sha}, on {source}:{line}.");
                if run.kill.load(Ordering::Relaxed) && !run.wrote.load(Ordering::Relaxed) {
                    return Err(ScriptError::Killed(text));
                }
                Err(ScriptError::Runtime(text))
            }
            Err(mlua::Error::MemoryError(_)) | Ok(Outcome::OutOfMemory) => {
                if run.abort.load(Ordering::Relaxed) {
                    return Err(ScriptError::Aborted);
                }
                Err(ScriptError::OutOfMemory)
            }
            Err(e) => {
                if run.abort.load(Ordering::Relaxed) {
                    return Err(ScriptError::Aborted);
                }
                let text = errtext(&e);
                Err(ScriptError::Runtime(format!(
                    "ERR Error running script {text} script: {sha}"
                )))
            }
        }
    }
}

/// The first line's flags, as Redis 7 reads `#!lua flags=a,b`.
fn parse_shebang(body: &[u8]) -> Result<ScriptFlags, ScriptError> {
    let mut flags = ScriptFlags::default();
    if !body.starts_with(b"#!") {
        return Ok(flags);
    }
    flags.shebang = true;
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err(ScriptError::Shebang("ERR Invalid script shebang".into()));
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let mut words = line.split(' ').filter(|w| !w.is_empty());
    let engine = words.next().unwrap_or_default();
    if engine != "#!lua" {
        return Err(ScriptError::Shebang(format!(
            "ERR Unexpected engine in script shebang: {engine}"
        )));
    }
    for word in words {
        let Some(list) = word.strip_prefix("flags=") else {
            return Err(ScriptError::Shebang(format!(
                "ERR Unknown lua shebang option: {word}"
            )));
        };
        for flag in list.split(',').filter(|f| !f.is_empty()) {
            match flag {
                "no-writes" => flags.no_writes = true,
                "allow-oom" => flags.allow_oom = true,
                "allow-stale" => flags.allow_stale = true,
                "no-cluster" => flags.no_cluster = true,
                "allow-cross-slot-keys" => flags.allow_cross_slot_keys = true,
                other => {
                    return Err(ScriptError::Shebang(format!(
                        "ERR Unexpected flag in script shebang: {other}"
                    )))
                }
            }
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_as_redis_reads_them() {
        assert_eq!(parse_shebang(b"return 1"), Ok(ScriptFlags::default()));
        let f = parse_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.shebang && f.no_writes && f.allow_oom && !f.no_cluster);
        assert_eq!(
            parse_shebang(b"#!lua\nreturn 1"),
            Ok(ScriptFlags {
                shebang: true,
                ..Default::default()
            })
        );
        for (body, err) in [
            (
                &b"#!python\nreturn 1"[..],
                "ERR Unexpected engine in script shebang: #!python",
            ),
            (
                b"#!lua flags=bogus\nreturn 1",
                "ERR Unexpected flag in script shebang: bogus",
            ),
            (
                b"#!lua x=1\nreturn 1",
                "ERR Unknown lua shebang option: x=1",
            ),
            (b"#!lua", "ERR Invalid script shebang"),
        ] {
            assert_eq!(parse_shebang(body).unwrap_err().to_string(), err);
        }
    }

    /// A host with no commands: every call is an unknown command.
    struct NoCommands;

    impl Host for NoCommands {
        fn call(&mut self, _: &Request<'_>, _: Protocol, reply: &mut ReplyBuf) -> Call {
            reply.error("ERR Unknown Redis command called from script");
            Call::default()
        }
        fn known(&mut self, _: &[u8]) -> bool {
            false
        }
    }

    fn eval(engine: &Engine, body: &str) -> Result<Vec<u8>, ScriptError> {
        eval_with(engine, body, &mut NoCommands)
    }

    /// Runs `body` with no keys or arguments on `host`; the reply's bytes.
    fn eval_with(engine: &Engine, body: &str, host: &mut dyn Host) -> Result<Vec<u8>, ScriptError> {
        let script = engine.prepare(body.as_bytes())?;
        let mut out = ReplyBuf::default();
        engine.reserve().run(
            &script,
            std::iter::empty(),
            std::iter::empty(),
            Protocol::Resp2,
            host,
            &mut out,
        )?;
        Ok(out.written_since(0).to_vec())
    }

    #[test]
    fn a_script_past_the_heap_cap_fails_and_the_engine_goes_on() {
        let engine = Engine::new(EngineConfig {
            memory_limit: 16 << 20,
            ..Default::default()
        });
        let hog = "local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 64) .. i end return #t";
        assert_eq!(eval(&engine, hog), Err(ScriptError::OutOfMemory));
        assert!(!engine.running() && !engine.busy());
        assert_eq!(eval(&engine, "return 1 + 1").unwrap(), b":2\r\n");
        assert!(engine.used_memory() < 16 << 20, "{}", engine.used_memory());
    }

    /// A host whose `big` command answers more than a small Lua heap can
    /// hold, and every other command `:5`.
    struct BigReply;

    impl Host for BigReply {
        fn call(&mut self, req: &Request<'_>, _: Protocol, reply: &mut ReplyBuf) -> Call {
            if req.arg(0) == b"big" {
                reply.array(100_000);
                // Distinct strings: Lua interns equal ones.
                for i in 0..100_000 {
                    reply.bulk(format!("{i:064}").as_bytes());
                }
            } else {
                reply.int(5);
            }
            Call::default()
        }
        fn known(&mut self, _: &[u8]) -> bool {
            true
        }
    }

    /// Lua raises a memory error with `longjmp` out of the middle of
    /// pushing a reply (`call.rs`), across the Rust frames of `redis.call`:
    /// the script fails with the heap's error, and the state, its call
    /// context and its buffers serve the next calls as before. (A frame
    /// owning a value with `Drop` there would leak or corrupt it; the
    /// frames' types are checked at compile time in `call.rs`.)
    #[test]
    fn a_reply_past_the_heap_cap_fails_the_script_and_calls_go_on() {
        let engine = Engine::new(EngineConfig {
            memory_limit: 4 << 20,
            ..Default::default()
        });
        let run = |body: &str| eval_with(&engine, body, &mut BigReply);
        for _ in 0..3 {
            assert_eq!(
                run("return #redis.call('big')"),
                Err(ScriptError::OutOfMemory)
            );
            assert_eq!(
                run("return redis.call('small', 'a', 'b')").unwrap(),
                b":5\r\n"
            );
        }
        assert!(engine.used_memory() < 4 << 20, "{}", engine.used_memory());
    }

    /// A thread that reserved a state gets one at once while every other
    /// state is held elsewhere: it never waits for a state once it may
    /// hold shards (see `Engine::reserve`).
    #[test]
    fn a_reserved_state_is_there_when_every_other_is_taken() {
        use std::sync::mpsc::channel;
        let engine = std::sync::Arc::new(Engine::new(EngineConfig {
            states: 2,
            ..Default::default()
        }));
        let (reserved_tx, reserved_rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let (result_tx, result_rx) = channel();
        let reserver = {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let _reserved = engine.reserve();
                reserved_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                result_tx.send(eval(&engine, "return 7")).unwrap();
            })
        };
        reserved_rx.recv().unwrap();
        // This thread takes the only other state and keeps it.
        let held = engine.lock();
        go_tx.send(()).unwrap();
        let result = result_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the reserving thread waited for a state");
        assert_eq!(result.unwrap(), b":7\r\n");
        drop(held);
        reserver.join().unwrap();
        // A flush empties every state, free or taken.
        let sha = engine.prepare(b"return 8").unwrap().sha().to_string();
        let held = engine.lock();
        engine.flush();
        drop(held);
        assert!(!engine.exists(sha.as_bytes()));
        assert_eq!(eval(&engine, "return 9").unwrap(), b":9\r\n");
    }

    #[test]
    fn sha1_of_a_script() {
        assert_eq!(
            &sha1hex(b"return 1"),
            b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_eq!(vm::version_num("7.2.0"), 0x070200);
    }
}
