//! Scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, as Redis 7
//! runs them, over the Lua engine of `crate::script`.
//!
//! This file is the engine's [`Host`]: `redis.call` from a script comes
//! here, is checked as Redis's `scriptCall` checks it (known command, arity,
//! `noscript`, writes in a read-only script, `--maxmemory`, cluster slot)
//! with Redis's words, and runs through the same `run` as a client's
//! command, on the shards the script holds.
//!
//! Atomicity without a global lock: a script locks the shards of the keys
//! it declares (`KEYS`), in ascending order as `EXEC` does, before it runs,
//! and holds every shard it takes to the end (two-phase locking: no other
//! command sees it half done). A script may also build key names itself
//! (Redis standalone allows it; the classic two-bucket counter does,
//! `KEYS[1] .. ':' .. window`). When it reaches a key whose shard it does not hold, it takes
//! that shard on the spot if that cannot deadlock: it waits for a shard
//! above every shard it holds (all multi-shard locking goes up, so such a
//! wait closes no cycle) and only tries for one below. When the try fails,
//! the run is stopped and runs again from the start holding, in order, its
//! declared keys and every key the stopped run reached; after [`RERUNS`]
//! such restarts (a script whose keys keep moving) it runs holding every
//! shard, which always finishes (Dragonfly's answer to undeclared keys).
//! A run stopped before writing had no effect. One that wrote is rolled
//! back first: from the moment a script reaches a key it did not declare
//! (and on every run once one has), each run keeps every key it writes as
//! it was before, and puts them back while it still holds their shards, so
//! no other client sees the stopped run. Only the writes of a script's very
//! first such run made before that moment cannot be undone: if that run
//! then fails the try, it waits for the shard at most
//! [`UNDECLARED_PATIENCE`] (an unbounded wait could deadlock with a
//! transaction that holds it and waits, in ascending order, for one of the
//! script's), and past that the call fails with an error the script sees
//! (and may catch with `redis.pcall`): at most once per script, and only
//! under that contention.
//!
//! A command that reaches every key (`KEYS`, `SCAN`, `DBSIZE`, `FLUSHALL`)
//! needs every shard: before a write the script starts again holding all
//! of them; after one, the call fails.

pub mod native;

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::cmd::exec::run;
use crate::cmd::exec::session::Session;
use crate::cmd::registry::error::CmdError;
use crate::cmd::registry::spec::{CommandSpec, Ctx, Flags, Registry};
use crate::protocol::{Protocol, ReplyBuf, Request};
use crate::script::{Call, Host, KillError, Script, ScriptError};
use crate::state::State;
use crate::stats::ScriptOutcome;
use crate::store::keys::Keys;
use crate::store::{Entry, Keyspace, Locked, Touch};

/// How long a script that has written waits for the shard of a key it did
/// not declare (see the module docs).
pub const UNDECLARED_PATIENCE: Duration = Duration::from_millis(100);

/// Restarts holding the keys a stopped run reached, before a script runs
/// holding every shard.
pub const RERUNS: usize = 3;

/// `EVAL`'s keys for the command table (routing, transactions, `COMMAND
/// GETKEYS`): `numkeys` keys after the script. None if `numkeys` is not a
/// count that fits: the command then refuses it when it runs.
pub fn eval_keys(args: &[&[u8]]) -> Vec<usize> {
    match args.get(2).map(|n| crate::util::parse_i64(n)) {
        Some(Some(n)) if n >= 0 && (n as u64) <= (args.len() - 3) as u64 => {
            (3..3 + n as usize).collect()
        }
        _ => Vec::new(),
    }
}

/// `numkeys`, checked as Redis's `evalGenericCommand` checks it.
fn numkeys(req: &Request<'_>) -> Result<usize, CmdError> {
    let n = crate::util::parse_i64(req.arg(2)).ok_or(CmdError::NotInteger)?;
    if n > (req.len() - 3) as i64 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    if n < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    Ok(n as usize)
}

/// ```text
/// EVAL script numkeys [key ...] [arg ...]
/// ```
pub fn eval(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let n = numkeys(req)?;
    let script = prepare(ctx, req.arg(1))?;
    run(ctx, &script, req, n, false)
}

/// ```text
/// EVAL_RO script numkeys [key ...] [arg ...]
/// ```
pub fn eval_ro(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let n = numkeys(req)?;
    let script = prepare(ctx, req.arg(1))?;
    run(ctx, &script, req, n, true)
}

/// ```text
/// EVALSHA sha1 numkeys [key ...] [arg ...]
/// ```
pub fn evalsha(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let n = numkeys(req)?;
    let script = cached(ctx, req.arg(1))?;
    run(ctx, &script, req, n, false)
}

/// ```text
/// EVALSHA_RO sha1 numkeys [key ...] [arg ...]
/// ```
pub fn evalsha_ro(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let n = numkeys(req)?;
    let script = cached(ctx, req.arg(1))?;
    run(ctx, &script, req, n, true)
}

/// The script of `EVAL`'s body, compiled and cached; one that does not
/// compile counts as a run that failed.
fn prepare(ctx: &Ctx<'_>, body: &[u8]) -> Result<Script, CmdError> {
    ctx.state.scripts.prepare(body).map_err(|e| {
        ctx.state.stats.counters.add_at(
            crate::metrics::table::SCRIPTS,
            ScriptOutcome::Error as usize,
            1,
        );
        script_error(e)
    })
}

fn cached(ctx: &Ctx<'_>, sha: &[u8]) -> Result<Script, CmdError> {
    ctx.state
        .scripts
        .get(sha)
        .ok_or_else(|| script_error(ScriptError::NoScript))
}

/// An engine error as the client sees it: the engine's text is Redis's
/// whole error line.
fn script_error(e: ScriptError) -> CmdError {
    CmdError::Prefixed(e.to_string().into())
}

/// Runs `script` with the keys and arguments of `req` (`n` keys), holding
/// the shards it needs (see the module docs), and writes its reply.
fn run(
    ctx: &mut Ctx<'_>,
    script: &Script,
    req: &Request<'_>,
    n: usize,
    read_only: bool,
) -> Result<(), CmdError> {
    let flags = script.flags();
    if flags.shebang {
        if flags.no_cluster && ctx.state.in_cluster() {
            return Err(CmdError::err(
                "Can not run script on cluster, 'no-cluster' flag is set.",
            ));
        }
        // A script that says what it does is refused up front under
        // --maxmemory, as Redis does, unless it only reads or allows it.
        if !flags.no_writes && !flags.allow_oom && over_maxmemory(ctx.state) {
            return Err(CmdError::OutOfMemory);
        }
    }
    // A catalogued script runs in Rust when it can (`cmd/script/native`): no Lua
    // state, no shard locks beyond its keys'. Read-only, only as long as
    // it calls no write command.
    // A user with rules runs the script in Lua, where each call is checked
    // against them as Redis checks `redis.call`.
    let unrestricted = ctx.state.acl.user_of(&ctx.session.user).unrestricted();
    if unrestricted && ctx.state.settings.scripts_native.load(Ordering::Relaxed) {
        if let Some(native) = native::find(script.sha()) {
            let over = over_maxmemory(ctx.state);
            let ro = read_only || flags.no_writes;
            if native::run(ctx, native, req, n, over, ro) {
                let state = ctx.state;
                state.stats.counters.add_at(
                    crate::metrics::table::SCRIPTS,
                    ScriptOutcome::Ok as usize,
                    1,
                );
                state
                    .stats
                    .counters
                    .inc(crate::metrics::table::SCRIPTS_NATIVE);
                return Ok(());
            }
        }
    }
    let settings = &ctx.state.settings;
    ctx.state.scripts.set_busy_threshold(Duration::from_millis(
        settings.get(&settings.lua_time_limit_ms),
    ));
    let Ctx {
        state,
        session,
        out,
        db,
        now,
        registry,
    } = ctx;
    let state: &State = state;
    // A Lua state first, then shards (see `Engine::reserve`).
    let vm = state.scripts.reserve();
    // A run that may be stopped and run again publishes when it is the
    // one that counts (inside `EXEC` a script is never run again).
    let defer = matches!(*db, Keyspace::Store(_)) && session.publish_later.is_none();
    if defer {
        session.publish_later = Some(Vec::new());
    }
    let result = run_until_done(
        state, registry, session, out, db, *now, vm, script, req, n, read_only, flags,
    );
    if defer {
        for (channel, message) in session.publish_later.take().unwrap_or_default() {
            state.pubsub.publish(&channel, &message);
        }
    }
    result
}

/// [`run`]'s loop: runs the script until a run is not stopped to run
/// again.
#[allow(clippy::too_many_arguments)]
fn run_until_done<'a>(
    state: &'a State,
    registry: &'static Registry,
    session: &mut Session,
    out: &mut ReplyBuf,
    db: &Keyspace<'a>,
    now: crate::clock::Nanos,
    vm: crate::script::Reserved<'_>,
    script: &Script,
    req: &Request<'_>,
    n: usize,
    read_only: bool,
    flags: crate::script::ScriptFlags,
) -> Result<(), CmdError> {
    let keys = || (3..3 + n).map(|i| req.arg(i));
    let args = || (3 + n..req.len()).map(|i| req.arg(i));
    let declared_slot = keys().next().map(crate::cluster::key_slot);
    // Shards reached by runs stopped so far, held in order by the next run.
    let mut reached: Vec<usize> = Vec::new();
    let mut reruns = 0;
    let mut every_shard = false;
    // A run that may be stopped and run again counts its commands and
    // sends its effects (to replicas, to the append-only file) only if it
    // is the run that counts (inside `EXEC` a script never runs again).
    let store = match *db {
        Keyspace::Store(store) => Some(store),
        Keyspace::Held(_) => None,
    };
    let mut run_stats = store.map(|_| {
        session
            .run_stats
            .take()
            .unwrap_or_else(|| Box::new(session.stats.for_a_run()))
    });
    let result = loop {
        let shards = match *db {
            Keyspace::Store(store) if every_shard => Locked::Own(store.lock_all()),
            Keyspace::Store(store) if reached.is_empty() => Locked::Own(store.lock_many(keys())),
            Keyspace::Store(store) => Locked::Own(store.lock_many_and(keys(), &reached)),
            Keyspace::Held(held) => Locked::Held(held),
        };
        if let Some(run) = &mut run_stats {
            session.stats.enter_run(run);
        }
        let held = store.map(|s| s.effects.hold());
        let mut host = ScriptHost {
            state,
            registry,
            session,
            now,
            shards,
            read_only: read_only || flags.no_writes,
            allow_oom: flags.allow_oom,
            script,
            slot: declared_slot,
            wrote: false,
            stop: None,
            reached: std::mem::take(&mut reached),
            undo: script.undeclared().then(Undo::default),
        };
        let mark = out.len();
        let resp = out.proto;
        let result = vm.run(script, keys(), args(), resp, &mut host, out);
        host.session.error_counted = vm.error_counted();
        let aborted = matches!(result, Err(ScriptError::Aborted));
        if aborted {
            host.roll_back();
            if let Some(later) = &mut host.session.publish_later {
                later.clear();
            }
            if let Some(held) = &held {
                held.discard();
            }
        }
        // The effects go out before the shard locks do, so each key's
        // frames keep the order of its writes.
        drop(held);
        let stop = host.stop;
        reached = std::mem::take(&mut host.reached);
        drop(host);
        if let Some(run) = &mut run_stats {
            session.stats.leave_run(run, !aborted);
        }
        if !matches!(result, Err(ScriptError::Aborted)) {
            let outcome = match result {
                Ok(()) => ScriptOutcome::Ok,
                Err(ScriptError::Killed(_)) => ScriptOutcome::Killed,
                Err(_) => ScriptOutcome::Error,
            };
            state
                .stats
                .counters
                .add_at(crate::metrics::table::SCRIPTS, outcome as usize, 1);
        }
        match result {
            Ok(()) => break Ok(()),
            Err(ScriptError::Aborted) if !every_shard && store.is_some() => {
                out.truncate(mark);
                reruns += 1;
                every_shard = stop == Some(Stop::EveryShard) || reruns > RERUNS;
            }
            Err(e) => {
                out.truncate(mark);
                break Err(script_error(e));
            }
        }
    };
    session.run_stats = run_stats;
    result
}

/// Whether memory in use is past `--maxmemory` (none set: never).
fn over_maxmemory(state: &State) -> bool {
    let max = state.settings.get(&state.settings.maxmemory);
    max != 0 && crate::alloc::used_memory() as u64 > max
}

/// What `redis.call` runs through: the command table and the shards the
/// script holds.
struct ScriptHost<'s, 'a> {
    state: &'a State,
    registry: &'static Registry,
    session: &'s mut Session,
    now: crate::clock::Nanos,
    /// The shards the script holds: its own lock, or those of the
    /// transaction it runs in (`EXEC` holds every shard for a script).
    shards: Locked<'a>,
    script: &'s Script,
    /// `EVAL_RO`, `EVALSHA_RO`, or a `no-writes` shebang.
    read_only: bool,
    allow_oom: bool,
    /// In cluster mode, the slot of the script's keys (the first key
    /// declared or reached); every key it reaches must be in it.
    slot: Option<u16>,
    /// A command of this run has written: it can no longer start again.
    wrote: bool,
    /// This run was stopped, to start again holding more.
    stop: Option<Stop>,
    /// When this run is stopped: the shards it held and reached (for the
    /// next run, which holds them from the start).
    reached: Vec<usize>,
    /// For a script known to reach undeclared keys (or from the moment
    /// this run does): each key this run wrote, as it was before its first
    /// write, so a run stopped after writing is rolled back and runs again.
    /// None: it cannot be (a command that writes every key ran).
    undo: Option<Undo>,
}

/// Each key a run wrote, as it was before its first write (None:
/// absent). A map: a script that writes 200,000 keys looks each up once
/// (a list searched per write made that run take minutes). Each key is put
/// back once, so the order of the roll-back does not matter.
type Undo = std::collections::HashMap<Box<[u8]>, Option<Entry>, ahash::RandomState>;

/// What a stopped run needs to run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The keys it reached, in order.
    Reached,
    /// Every shard (a command that reaches every key).
    EveryShard,
}

/// Why `redis.call` refuses a command before it runs, in Redis's words.
enum Refusal {
    Error(CmdError),
    /// Stop the script: it reached an undeclared key it could not take
    /// before writing.
    Abort(Stop),
}

impl From<CmdError> for Refusal {
    fn from(e: CmdError) -> Self {
        Refusal::Error(e)
    }
}

impl ScriptHost<'_, '_> {
    /// The command `req` names and the spec that runs it (a subcommand's),
    /// in Redis's words for a script when there is none.
    fn resolve(
        &self,
        req: &Request<'_>,
    ) -> Result<(&'static CommandSpec, &'static CommandSpec), CmdError> {
        let (cmd, sub) = self
            .registry
            .resolve_renamed(&self.state.renames, req)
            .map_err(|e| match e {
                CmdError::UnknownCommand { .. } => {
                    CmdError::err("Unknown Redis command called from script")
                }
                CmdError::WrongArity(_) => {
                    CmdError::err("Wrong number of args calling Redis command from script")
                }
                e => e,
            })?;
        Ok((cmd, sub.unwrap_or(cmd)))
    }

    /// The checks Redis's `scriptCall` makes of a known command, in its
    /// order and words.
    fn permit(&mut self, spec: &'static CommandSpec, req: &Request<'_>) -> Result<(), Refusal> {
        if spec.flags.contains(Flags::NOSCRIPT) {
            return Err(CmdError::err("This Redis command is not allowed from script").into());
        }
        // The user's rules, as Redis's `scriptVerifyACL` checks them.
        let user = self.state.acl.user_of(&self.session.user);
        if !user.unrestricted() {
            if let Some(cmd) = self.registry.renamed(&self.state.renames, req.arg(0)) {
                let sub = (!std::ptr::eq(cmd, spec)).then_some(spec);
                crate::cmd::exec::permit::permit_cell(self.registry, user, cmd, sub, req).map_err(
                    |r| {
                        let context = crate::acl::log::Context::Lua;
                        let (state, session, now) = (self.state, &*self.session, self.now);
                        crate::cmd::exec::permit::log(state, session, now, r, context, cmd, sub);
                        Refusal::from(r.in_script())
                    },
                )?;
            }
        }
        if spec.flags.contains(Flags::WRITE) && self.read_only {
            return Err(
                CmdError::err("Write commands are not allowed from read-only scripts.").into(),
            );
        }
        if spec.flags.contains(Flags::WRITE) && self.state.replication.is_replica() {
            return Err(CmdError::ReadOnlyReplica.into());
        }
        crate::cmd::exec::run::admit_persist(self.state, spec)?;
        if spec.flags.contains(Flags::DENYOOM) && !self.allow_oom && over_maxmemory(self.state) {
            return Err(CmdError::OutOfMemory.into());
        }
        if self.state.in_cluster() {
            let mut slot = self.slot;
            spec.try_for_each_key(req, |key| {
                let s = crate::cluster::key_slot(key);
                if !self.state.serves_slot(s) {
                    return Err(CmdError::err(
                        "Script attempted to access a non local key in a cluster node script",
                    ));
                }
                match slot.replace(s) {
                    Some(first) if first != s => Err(CmdError::err(
                        "Script attempted to access keys that do not hash to the same slot",
                    )),
                    _ => Ok(()),
                }
            })?;
            self.slot = slot;
        }
        self.reach(spec, req)
    }

    /// Makes sure the script holds the shards of every key `spec` reaches
    /// (see the module docs).
    fn reach(&mut self, spec: &CommandSpec, req: &Request<'_>) -> Result<(), Refusal> {
        let all = spec.flags.contains(Flags::ALL_KEYS);
        let mut missing = all && !self.shards.holds_all();
        if !missing {
            let shards = &self.shards;
            missing = spec
                .try_for_each_key(req, |k| if shards.holds(k) { Ok(()) } else { Err(()) })
                .is_err();
        }
        if !missing {
            return Ok(());
        }
        let own = matches!(self.shards, Locked::Own(_));
        if own {
            self.script.mark_undeclared();
            if !self.wrote && self.undo.is_none() {
                self.undo = Some(Undo::default());
            }
        }
        let can_stop = !self.wrote || self.undo.is_some();
        if all {
            return if can_stop && own {
                Err(Refusal::Abort(Stop::EveryShard))
            } else {
                Err(CmdError::err(
                    "Script reached every key after writing, without holding them; call it first",
                )
                .into())
            };
        }
        let Locked::Own(lock) = &mut self.shards else {
            return Err(CmdError::err("Script reached a key its transaction does not hold").into());
        };
        // Take what cannot deadlock.
        let taken = spec
            .try_for_each_key(req, |k| if lock.lock_more(k) { Ok(()) } else { Err(()) })
            .is_ok();
        if taken {
            return Ok(());
        }
        if can_stop {
            // The next run holds, in order, all this one held and reached.
            self.reached.clear();
            self.reached.extend(lock.shards());
            let store = lock.store();
            let reached = &mut self.reached;
            let _ = spec.try_for_each_key(req, |k| {
                reached.push(store.shard_of(k));
                Ok::<(), ()>(())
            });
            return Err(Refusal::Abort(Stop::Reached));
        }
        let waited = spec
            .try_for_each_key(req, |k| {
                if lock.try_lock_more(k, UNDECLARED_PATIENCE) {
                    Ok(())
                } else {
                    Err(())
                }
            })
            .is_ok();
        if waited {
            Ok(())
        } else {
            Err(CmdError::err(
                "Script reached a key it did not declare, after writing, while another client held it; declare the script's keys in KEYS",
            )
            .into())
        }
    }
}

impl Host for ScriptHost<'_, '_> {
    /// Redis's `luaRedisAclCheckCmdPermissionsCommand`: the command (and
    /// subcommand) as `lookupCommand` finds it, arity unchecked, then the
    /// user's rules as dispatch applies them. Nothing is logged.
    fn acl_check(&mut self, req: &Request<'_>) -> Option<bool> {
        let (cmd, sub) = match self.registry.resolve_renamed(&self.state.renames, req) {
            Ok(found) => found,
            Err(CmdError::WrongArity(_)) => (
                self.registry.renamed(&self.state.renames, req.arg(0))?,
                None,
            ),
            Err(_) => return None,
        };
        let user = self.state.acl.user_of(&self.session.user);
        Some(crate::cmd::exec::permit::permit_cell(self.registry, user, cmd, sub, req).is_ok())
    }

    fn call(&mut self, req: &Request<'_>, resp: Protocol, reply: &mut ReplyBuf) -> Call {
        reply.proto = resp;
        if self.stop.is_some() || req.is_empty() {
            return Call {
                wrote: false,
                abort: self.stop.is_some(),
            };
        }
        self.call_request(req, reply)
    }
}

impl ScriptHost<'_, '_> {
    fn call_request(&mut self, req: &Request<'_>, reply: &mut ReplyBuf) -> Call {
        let (cmd, spec) = match self.resolve(req) {
            Ok(found) => found,
            Err(e) => return self.refuse(&e, None, reply),
        };
        match self.permit(spec, req) {
            Ok(()) => {}
            Err(Refusal::Abort(stop)) => {
                self.stop = Some(stop);
                return Call {
                    wrote: false,
                    abort: true,
                };
            }
            Err(Refusal::Error(e)) => return self.refuse(&e, Some(cmd), reply),
        }
        if spec.flags.contains(Flags::WRITE) {
            self.save_undo(spec, req);
        }
        let mark = reply.len();
        let (state, registry, now) = (self.state, self.registry, self.now);
        let session = &mut *self.session;
        match &mut self.shards {
            Locked::Own(lock) => {
                let held = lock.held();
                run_held(
                    state,
                    registry,
                    session,
                    reply,
                    Keyspace::Held(&held),
                    now,
                    (cmd, spec),
                    req,
                );
            }
            Locked::Held(h) => h.relend(|held, _| {
                run_held(
                    state,
                    registry,
                    session,
                    reply,
                    Keyspace::Held(held),
                    now,
                    (cmd, spec),
                    req,
                )
            }),
        }
        let failed = reply.written_since(mark).first() == Some(&b'-');
        let wrote = spec.flags.contains(Flags::WRITE) && !failed;
        self.wrote |= wrote;
        Call {
            wrote,
            abort: false,
        }
    }
}

impl ScriptHost<'_, '_> {
    /// A call refused before it ran, counted as Redis counts a command a
    /// script may not run: one error reply (which the script's own, if it
    /// fails with it, is not added to) and, for a known command, a
    /// rejected call of it.
    fn refuse(
        &mut self,
        e: &CmdError,
        cmd: Option<&'static CommandSpec>,
        reply: &mut ReplyBuf,
    ) -> Call {
        let text = e.to_string();
        reply.error(&text);
        self.session.stats.error_reply(text.as_bytes());
        if let Some(cmd) = cmd {
            self.session.stats.rejected(self.registry.index_of(cmd));
        }
        Call::default()
    }

    /// Before a write: keeps, for each key it reaches that this run has not
    /// written yet, the value before (see [`ScriptHost::undo`]).
    fn save_undo(&mut self, spec: &CommandSpec, req: &Request<'_>) {
        let (Some(undo), Locked::Own(lock)) = (&mut self.undo, &mut self.shards) else {
            return;
        };
        let now = self.now;
        let mut keys = 0;
        let _ = spec.try_for_each_key(req, |k| {
            keys += 1;
            if !undo.contains_key(k) {
                let before = lock.get(k, now, Entry::clone);
                undo.insert(k.into(), before);
            }
            Ok::<(), ()>(())
        });
        if keys == 0 || spec.flags.contains(Flags::ALL_KEYS) {
            self.undo = None;
        }
    }

    /// Puts back what a stopped run wrote, while it still
    /// holds the shards: no other client saw any of it.
    fn roll_back(&mut self) {
        debug_assert!(!self.wrote || self.undo.is_some(), "stopped after writing");
        let (Some(undo), Locked::Own(lock)) = (self.undo.take(), &mut self.shards) else {
            return;
        };
        for (key, before) in undo {
            lock.update_touching(&key, self.now, Touch::Always, |e| *e = before);
        }
        self.undo = Some(Undo::default());
    }
}

/// Runs a command of a script on the shards it holds.
#[allow(clippy::too_many_arguments)]
fn run_held<'x>(
    state: &'x State,
    registry: &'static Registry,
    session: &'x mut Session,
    out: &'x mut ReplyBuf,
    db: Keyspace<'x>,
    now: crate::clock::Nanos,
    (cmd, spec): (&'static CommandSpec, &'static CommandSpec),
    req: &Request<'_>,
) {
    let mut inner = Ctx {
        state,
        session,
        out,
        db,
        now,
        registry,
    };
    run::run(&mut inner, cmd, spec, req);
}

/// ```text
/// SCRIPT LOAD script
/// ```
pub fn load(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let script = ctx.state.scripts.load(req.arg(2)).map_err(script_error)?;
    ctx.out.bulk(script.sha().as_bytes());
    Ok(())
}

/// ```text
/// SCRIPT EXISTS sha1 [sha1 ...]
/// ```
pub fn exists(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.array(req.len() - 2);
    for sha in req.args().skip(2) {
        ctx.out.int(ctx.state.scripts.exists(sha) as i64);
    }
    Ok(())
}

/// ```text
/// SCRIPT FLUSH [ASYNC | SYNC]
/// ```
/// Both modes drop the cache at once: it is small, and nothing else waits
/// on it.
pub fn flush(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    match req.len() {
        2 => {}
        3 if crate::cmd::registry::args::is(req.arg(2), "SYNC")
            || crate::cmd::registry::args::is(req.arg(2), "ASYNC") => {}
        _ => return Err(CmdError::err("SCRIPT FLUSH only support SYNC|ASYNC option")),
    }
    ctx.state.scripts.flush();
    ctx.out.ok();
    Ok(())
}

/// ```text
/// SCRIPT KILL
/// ```
pub fn kill(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    match ctx.state.scripts.kill() {
        Ok(()) => {
            ctx.out.ok();
            Ok(())
        }
        Err(KillError::NotBusy) => Err(CmdError::Prefixed(
            "NOTBUSY No scripts in execution right now.".into(),
        )),
        Err(KillError::Unkillable) => Err(CmdError::Prefixed(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".into(),
        )),
    }
}

/// ```text
/// SCRIPT HELP
/// ```
pub fn help(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    const LINES: &[&str] = &[
        "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "EXISTS <sha1> [<sha1> ...]",
        "    Return information about the existence of the scripts in the script cache.",
        "FLUSH [ASYNC|SYNC]",
        "    Flush the Lua scripts cache. Very dangerous on replicas.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the scripts cache.",
        "    * SYNC: Synchronously flush the scripts cache.",
        "KILL",
        "    Kill the currently executing Lua script.",
        "LOAD <script>",
        "    Load a script into the scripts cache without executing it.",
        "HELP",
        "    Prints this help.",
    ];
    ctx.out.array(LINES.len());
    for line in LINES {
        ctx.out.simple(line);
    }
    Ok(())
}
