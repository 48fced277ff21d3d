//! What the engine, its Lua states and its callers share: the settings,
//! a compiled script and its flags, the errors, the `Host` a script's
//! `redis.call` goes through, and the state a running script shares with
//! its hook and with `SCRIPT KILL`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mlua::VmState;

use crate::protocol::{Protocol, ReplyBuf, Request};

/// Scripts cached by `EVAL` (not `SCRIPT LOAD`) kept at most: past it the
/// least recently used one is forgotten, as Redis 7.4 does, so clients
/// that build a new script text per call (a value spliced into the body)
/// cannot grow the cache and the Lua heaps without bound. An evicted
/// script's `EVALSHA` answers `NOSCRIPT`, and clients send `EVAL` again.
pub const EVAL_SCRIPTS_MAX: usize = 500;

/// Runs between two steps of a state's collector (Redis's
/// `LUA_GC_CYCLE_PERIOD`).
pub(super) const GC_EVERY: u32 = 50;

/// Kilobytes of collector work each of those steps does: Redis passes
/// `LUA_GC_CYCLE_PERIOD` to `lua_gc(LUA_GCSTEP)`, so the collector keeps
/// pace with scripts that allocate (one basic step did not).
pub(super) const GC_STEP_KB: i32 = 50;

/// Instructions between two looks at the clock and the kill flag: about a
/// millisecond of Lua, and no measurable cost.
pub const HOOK_EVERY: u32 = 100_000;

/// What `SCRIPT KILL` makes a script raise (Redis's words).
pub(super) const KILLED: &str = "Script killed by user with SCRIPT KILL...";

/// A script that has run this long hands its worker's other tasks to
/// another thread (see [`Running::hand_off`]), and again each time as long
/// again has passed: no rate-limiter script runs anywhere near this long,
/// so only runaway ones pay for it.
pub(super) const HANDOFF_AFTER: Duration = Duration::from_millis(10);

/// How long a hand-off waits for the runtime to show it goes on without
/// this thread. One that does not (a loaded machine: the new thread has
/// not started yet) is tried again [`HANDOFF_AFTER`] later, so a script
/// that loops for ever never keeps the other clients waiting long.
pub(super) const HANDOFF_WAIT: Duration = Duration::from_millis(2);

/// How the engine waits for the Lua state while another script holds it
/// long (see `store::Blocking`).
pub type Blocking = fn(&mut dyn FnMut());

/// How a script that runs long hands its async worker to another thread,
/// waiting at most the time given for the runtime to go on without this
/// one (see `server::hand_off_worker`).
pub type HandOff = fn(Duration);

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
pub struct Script(pub(super) Arc<ScriptInner>);

#[derive(Debug)]
pub(super) struct ScriptInner {
    pub(super) sha: [u8; 40],
    /// The text, for the states that have not compiled it yet.
    pub(super) body: Box<[u8]>,
    pub(super) flags: ScriptFlags,
    /// A run of it reached a key it did not declare: later runs keep what
    /// they overwrite, so that they can be stopped and run again even
    /// after writing (`cmd::script`).
    pub(super) undeclared: AtomicBool,
    /// `SCRIPT LOAD` cached it: it stays until `SCRIPT FLUSH`. Scripts
    /// only `EVAL` cached are evicted, least recently used first, past
    /// [`EVAL_SCRIPTS_MAX`].
    pub(super) loaded: AtomicBool,
    /// The engine's tick when it last ran or was cached (see `Engine::tick`).
    pub(super) used: AtomicU64,
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

    /// `redis.acl_check_cmd`: whether the script's user may run `req`
    /// (its command, subcommand and keys), or `None` when it names no
    /// command.
    fn acl_check(&mut self, req: &Request<'_>) -> Option<bool>;
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
pub(super) fn sha_key(sha: &[u8]) -> Option<[u8; 40]> {
    let mut key: [u8; 40] = sha.try_into().ok()?;
    key.make_ascii_lowercase();
    Some(key)
}

/// State the hook and `SCRIPT KILL` share with the running script.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) base: Instant,
    /// Nanoseconds after `base` the running script started.
    pub(super) started: AtomicU64,
    pub(super) running: AtomicBool,
    pub(super) busy: AtomicBool,
    pub(super) kill: AtomicBool,
    /// The host asked to stop (to run again over every shard).
    pub(super) abort: AtomicBool,
    pub(super) wrote: AtomicBool,
    pub(super) threshold_ms: AtomicU64,
    /// How a long run hands its async worker on (see [`HandOff`]).
    pub(super) hand_off: OnceLock<HandOff>,
    /// When (nanoseconds into the run) it last did; 0 before the first.
    pub(super) handed_at: AtomicU64,
    /// This run's error (raised, or returned as `{err = ...}`) is a
    /// command's, counted when the command failed.
    pub(super) counted: AtomicBool,
}

impl Running {
    /// Whether the script must stop now. A kill (`SCRIPT KILL`, shutdown)
    /// that arrives while a command of the script writes is not obeyed:
    /// `wrote` is set by this thread right after that command, so a
    /// script is never stopped with half its writes done.
    pub(super) fn stopping(&self) -> bool {
        (self.kill.load(Ordering::Relaxed) && !self.wrote.load(Ordering::Relaxed))
            || self.abort.load(Ordering::Relaxed)
    }

    /// A script this long keeps its thread a while: the tasks queued on
    /// that async worker (other clients, the socket poller) are handed to
    /// another thread instead of waiting for the script to end. Tried
    /// again every [`HANDOFF_AFTER`] while the script runs: a hand-off can
    /// come too early for the new thread on a loaded machine, and then the
    /// worker's tasks come back to this thread.
    fn hand_off(&self, ran: u64) {
        let last = self.handed_at.load(Ordering::Relaxed);
        let every = HANDOFF_AFTER.as_nanos() as u64;
        if ran < last.saturating_add(every) {
            return;
        }
        self.handed_at.store(ran, Ordering::Relaxed);
        if let Some(hand_off) = self.hand_off.get() {
            hand_off(HANDOFF_WAIT);
        }
    }

    /// The hook: hands a long script's worker on, notes a script past the
    /// threshold, stops a killed one.
    pub(super) fn check(&self) -> mlua::Result<VmState> {
        if !self.running.load(Ordering::Relaxed) {
            return Ok(VmState::Continue);
        }
        let ran = self.base.elapsed().as_nanos() as u64 - self.started.load(Ordering::Relaxed);
        self.hand_off(ran);
        let threshold = self
            .threshold_ms
            .load(Ordering::Relaxed)
            .saturating_mul(1_000_000);
        if ran >= threshold {
            self.busy.store(true, Ordering::Relaxed);
        }
        if self.stopping() {
            return Err(mlua::Error::RuntimeError(KILLED.into()));
        }
        Ok(VmState::Continue)
    }
}

/// The first line's flags, as Redis 7 reads `#!lua flags=a,b`.
pub(super) fn parse_shebang(body: &[u8]) -> Result<ScriptFlags, ScriptError> {
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
