//! The Lua engine behind `EVAL`: Lua 5.1 as Redis embeds it (the `mlua`
//! crate, Lua compiled in), sandboxed as Redis 7.0 sandboxes it, with the
//! `redis` library and the four libraries Redis loads (`cjson`, `cmsgpack`,
//! `struct`, `bit`; `libs/`, in Rust, each refusing bad input with an
//! error, never a crash).
//!
//! The engine knows nothing of commands or keys: `redis.call` goes to a
//! [`Host`] the command layer provides (`cmd/script/mod.rs`), which runs the
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

mod api;
mod call;
mod convert;
mod heap;
mod libs;
mod vm;

pub use api::*;
use vm::{errtext, Outcome, Vm};

use std::collections::HashMap;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{ReentrantMutex, ReentrantMutexGuard, RwLock};
use std::cell::RefCell;

use crate::protocol::{Protocol, ReplyBuf};

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
    /// Keyed by ahash, not SipHash: looked up on every `EVALSHA`.
    scripts: HashMap<[u8; 40], Script, ahash::RandomState>,
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
                    hand_off: OnceLock::new(),
                    handed_at: AtomicU64::new(0),
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

    /// Sets how long waits for a Lua state are made, and how a long
    /// script hands its async worker on; once.
    pub fn set_blocking(&self, wait: Blocking, hand_off: HandOff) {
        let _ = self.blocking.set(wait);
        for s in self.slots.iter() {
            let _ = s.run.hand_off.set(hand_off);
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
    ///
    /// A free state that exists is taken before a free slot without one,
    /// so a state is made only when every existing one is running: one
    /// client's scripts, whichever worker runs them, keep to one heap (and
    /// `used_memory_lua` to one state's size).
    fn lock(&self) -> (&Slot, VmGuard<'_>) {
        let n = self.slots.len();
        let home = home_slot(n);
        let mut empty = None;
        for i in 0..n {
            let slot = &self.slots[(home + i) % n];
            if let Some(g) = slot.vm.try_lock() {
                let g = self.fresh(slot, g);
                if g.try_borrow().map_or(true, |cell| cell.is_some()) {
                    return (slot, g);
                }
                if empty.is_none() {
                    empty = Some((slot, g));
                }
            }
        }
        if let Some(found) = empty {
            return found;
        }
        let slot = &self.slots[home];
        (slot, self.lock_slot(slot))
    }

    fn lock_slot<'s>(&self, slot: &'s Slot) -> VmGuard<'s> {
        let g = crate::util::lock_or_wait_off(
            |d| slot.vm.try_lock_for(d),
            || slot.vm.lock(),
            |f| match self.blocking.get() {
                Some(wait) => wait(f),
                None => f(),
            },
        );
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
            slot.memory.store(vm.state.used(), Ordering::Relaxed);
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
        slot.memory.store(vm.state.used(), Ordering::Relaxed);
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
        for flag in [&run.busy, &run.kill, &run.abort, &run.wrote, &run.counted] {
            flag.store(false, Ordering::Relaxed);
        }
        run.handed_at.store(0, Ordering::Relaxed);
        run.running.store(true, Ordering::Relaxed);
        let result = vm.run(f, keys, args, resp, host, out);
        if matches!(
            result,
            Err(mlua::Error::MemoryError(_)) | Ok(Outcome::OutOfMemory)
        ) {
            // What the failed script built is garbage now: collect it, so
            // the next script starts under the cap.
            vm.state.uncapped(|| {
                let _ = vm.lua.gc_collect();
                let _ = vm.lua.gc_collect();
            });
        }
        run.running.store(false, Ordering::Relaxed);
        run.busy.store(false, Ordering::Relaxed);
        // Steps of the collector every GC_EVERY runs, as many as Redis
        // takes, so a state's garbage stays near what its scripts keep.
        let runs = vm.runs.get().wrapping_add(1);
        vm.runs.set(runs);
        if runs % GC_EVERY == 0 {
            vm.state.uncapped(|| vm.gc_step()).ok();
        }
        slot.memory.store(vm.state.used(), Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Request;

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
        fn acl_check(&mut self, _: &Request<'_>) -> Option<bool> {
            None
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
        fn acl_check(&mut self, _: &Request<'_>) -> Option<bool> {
            Some(true)
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

    /// Redis's suite runs 10,000 scripts on one connection and expects
    /// `used_memory_lua` under 100 KB: one client's scripts, from whichever
    /// thread, keep to one state, and the collector keeps pace.
    #[test]
    fn one_clients_scripts_keep_to_one_state_and_its_garbage_is_collected() {
        let engine = std::sync::Arc::new(Engine::new(EngineConfig {
            states: 2,
            ..Default::default()
        }));
        assert_eq!(eval(&engine, "return 1").unwrap(), b":1\r\n");
        let one = engine.used_memory();
        assert!(one > 0);
        for _ in 0..4 {
            let engine = engine.clone();
            std::thread::spawn(move || eval(&engine, "return 2").unwrap())
                .join()
                .unwrap();
        }
        let after = engine.used_memory();
        assert!(after < one + one / 2, "{one} then {after}");
        for _ in 0..10_000 {
            eval(&engine, "return {1, 'two', {tostring(3)}}").unwrap();
        }
        let used = engine.used_memory();
        assert!(used < 100 << 10, "{used}");
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
