//! What a command is: its name, arity, flags, key positions, documentation
//! and handler (`CommandSpec`), as `COMMAND` reports it; the context a
//! handler runs with (`Ctx`); and the registry of every command a handler
//! looks others up in (`Registry`). The table itself is `table.rs`, which
//! names every handler; handlers reach it only through `Ctx::registry`, so
//! no handler imports the table and no import circle runs through it.
//! The three types share this file because each names the others.

use std::collections::HashMap;

use super::error::{show, CmdError};
use crate::acl::{Access, CatSet};
use crate::clock::Nanos;
use crate::cmd::exec::session::Session;
use crate::protocol::request::ArgsMemo;
use crate::protocol::{ReplyBuf, Request};
use crate::state::{Renames, State};
use crate::store::Keyspace;

/// Everything a handler may touch while running one command.
pub struct Ctx<'a> {
    pub state: &'a State,
    pub session: &'a mut Session,
    pub out: &'a mut ReplyBuf,
    /// The keyspace, as this command may reach it: every handler reads
    /// and writes keys through it (in `EXEC`, it holds the transaction's
    /// shard locks).
    pub db: Keyspace<'a>,
    /// Read once per command: every decision in it sees one instant.
    pub now: Nanos,
    /// Every command, for those that run or describe others (`EXEC`,
    /// scripts, `COMMAND`).
    pub registry: &'static Registry,
}

pub type Handler = fn(&mut Ctx<'_>, &Request<'_>) -> Result<(), CmdError>;

/// Finds the key indexes of a request, for commands whose keys the
/// first/last/step triple cannot describe.
pub type KeyFinder = fn(&[&[u8]]) -> Vec<usize>;

/// Command flags, named as `COMMAND INFO` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags(u32);

impl Flags {
    pub const WRITE: Flags = Flags(1);
    pub const READONLY: Flags = Flags(1 << 1);
    pub const DENYOOM: Flags = Flags(1 << 2);
    pub const ADMIN: Flags = Flags(1 << 3);
    pub const NOSCRIPT: Flags = Flags(1 << 4);
    pub const LOADING: Flags = Flags(1 << 5);
    pub const STALE: Flags = Flags(1 << 6);
    pub const FAST: Flags = Flags(1 << 7);
    /// Runs before AUTH (Redis's `no_auth`).
    pub const NO_AUTH: Flags = Flags(1 << 8);
    pub const MOVABLEKEYS: Flags = Flags(1 << 9);
    pub const DANGEROUS: Flags = Flags(1 << 10);
    /// Refused inside `MULTI` (Redis's `no_multi`).
    pub const NO_MULTI: Flags = Flags(1 << 11);
    /// Runs at once inside `MULTI` instead of being queued: `EXEC`,
    /// `DISCARD`, `MULTI`, `WATCH`, `QUIT`, `RESET` (Redis lists them in
    /// `processCommand`; not a `COMMAND INFO` flag).
    pub const NOT_QUEUED: Flags = Flags(1 << 12);
    /// Reaches keys beyond its arguments (`DBSIZE`, `KEYS`, `SCAN`,
    /// `FLUSHALL`, `INFO`'s keyspace): a transaction with one locks every
    /// shard. Not a `COMMAND INFO` flag.
    pub const ALL_KEYS: Flags = Flags(1 << 13);
    /// Runs while a script is past the busy threshold, when every other
    /// command is answered `BUSY` (Redis's `allow_busy`).
    pub const ALLOW_BUSY: Flags = Flags(1 << 14);
    /// A Pub/Sub command (Redis's `pubsub`).
    pub const PUBSUB: Flags = Flags(1 << 15);
    /// Served as if `ASKING` had been sent (Redis's `asking`:
    /// `RESTORE-ASKING`, which MIGRATE sends to a slot's importing node).
    pub const ASKING: Flags = Flags(1 << 16);
    /// Its keys are only written, never read (Redis 7's key specs:
    /// `INSERT`, `DELETE` or `UPDATE` without `ACCESS`): a `%W~` pattern
    /// is enough for them. Not a `COMMAND INFO` flag.
    pub const KEYS_WRITE_ONLY: Flags = Flags(1 << 17);
    /// Its keys are neither read nor written, only looked at (`EXISTS`,
    /// `TYPE`, `WATCH`): any pattern matching them is enough.
    pub const KEYS_UNREAD: Flags = Flags(1 << 18);

    const NAMES: [(Flags, &'static str); 14] = [
        (Flags::WRITE, "write"),
        (Flags::READONLY, "readonly"),
        (Flags::DENYOOM, "denyoom"),
        (Flags::ADMIN, "admin"),
        (Flags::PUBSUB, "pubsub"),
        (Flags::NOSCRIPT, "noscript"),
        (Flags::LOADING, "loading"),
        (Flags::STALE, "stale"),
        (Flags::FAST, "fast"),
        (Flags::NO_AUTH, "no_auth"),
        (Flags::MOVABLEKEYS, "movablekeys"),
        (Flags::NO_MULTI, "no_multi"),
        (Flags::ALLOW_BUSY, "allow_busy"),
        (Flags::ASKING, "asking"),
    ];

    pub const fn empty() -> Flags {
        Flags(0)
    }

    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flag names `COMMAND INFO` lists.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .into_iter()
            .filter(move |(f, _)| self.contains(*f))
            .map(|(_, n)| n)
    }

    /// ACL categories implied by the flags, as Redis's
    /// `setImplicitACLCategories` derives them: `write`, `read` (unless the
    /// command is `@scripting`), `admin` and `dangerous`, `pubsub`, `fast`
    /// or else `slow`.
    pub fn implied_categories(self, declared: CatSet) -> CatSet {
        let mut c = CatSet::empty();
        for (f, cat) in [
            (Flags::WRITE, CatSet::WRITE),
            (Flags::ADMIN, CatSet::ADMIN.with(CatSet::DANGEROUS)),
            (Flags::DANGEROUS, CatSet::DANGEROUS),
            (Flags::PUBSUB, CatSet::PUBSUB),
            (Flags::FAST, CatSet::FAST),
        ] {
            if self.contains(f) {
                c = c.with(cat);
            }
        }
        if self.contains(Flags::READONLY) && !declared.contains(CatSet::SCRIPTING) {
            c = c.with(CatSet::READ);
        }
        if !self.contains(Flags::FAST) {
            c = c.with(CatSet::SLOW);
        }
        c
    }
}

/// Where a command's keys are: Redis's first/last/step triple (last < 0
/// counts from the end). A command without keys has `first == 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub first: i32,
    pub last: i32,
    pub step: i32,
}

impl KeySpec {
    pub const NONE: KeySpec = KeySpec {
        first: 0,
        last: 0,
        step: 0,
    };
    pub const FIRST: KeySpec = KeySpec {
        first: 1,
        last: 1,
        step: 1,
    };
    pub const ALL: KeySpec = KeySpec {
        first: 1,
        last: -1,
        step: 1,
    };
    pub const PAIRS: KeySpec = KeySpec {
        first: 1,
        last: -1,
        step: 2,
    };
    /// The first two arguments (`RENAME key newkey`).
    pub const FIRST_TWO: KeySpec = KeySpec {
        first: 1,
        last: 2,
        step: 1,
    };

    /// Indexes of the keys in a request of `argc` arguments.
    pub fn positions(self, argc: usize) -> impl Iterator<Item = usize> {
        let argc = argc as i64;
        let first = self.first as i64;
        let last = if self.last < 0 {
            argc + self.last as i64
        } else {
            self.last as i64
        };
        let step = self.step.max(1) as usize;
        let range = if first == 0 || first >= argc {
            1..1
        } else {
            first..(last.min(argc - 1) + 1)
        };
        range.step_by(step).map(|i| i as usize)
    }
}

#[derive(Debug)]
pub struct CommandSpec {
    /// Lower-case name; a subcommand's is its own word (`setname`).
    pub name: &'static str,
    /// Exact argument count, or at least `-arity` when negative; the name
    /// (and a subcommand's container name) included.
    pub arity: i32,
    pub flags: Flags,
    pub keys: KeySpec,
    pub group: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    pub complexity: &'static str,
    pub handler: Handler,
    pub subcommands: &'static [CommandSpec],
    /// For `movablekeys` commands, whose keys the triple cannot describe:
    /// the key indexes of a request.
    pub key_finder: Option<KeyFinder>,
    /// The ACL categories the table declares beyond those the flags imply
    /// ([`CommandSpec::categories`] has both).
    pub acl: CatSet,
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = self.arity as i64;
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// Every ACL category of the command: declared and implied.
    pub fn categories(&self) -> CatSet {
        self.acl.with(self.flags.implied_categories(self.acl))
    }

    /// What the command does with its keys, for `%R~` and `%W~` patterns
    /// (Redis 7's key specs): reads them if read-only, only writes them
    /// with `KEYS_WRITE_ONLY`, only looks at them with `KEYS_UNREAD`, and
    /// otherwise reads and writes (a command with keys of both kinds, as
    /// `RENAME`, asks both of each). `SET` reads its key only with `GET`
    /// (Redis's `VARIABLE_FLAGS`).
    pub fn key_access(&self, req: &Request<'_>) -> Access {
        if self.name == "set" {
            let get = req.args().skip(3).any(|a| a.eq_ignore_ascii_case(b"GET"));
            return if get {
                Access::READ_WRITE
            } else {
                Access::WRITE
            };
        }
        if self.flags.contains(Flags::KEYS_UNREAD) {
            Access::NONE
        } else if self.flags.contains(Flags::KEYS_WRITE_ONLY) {
            Access::WRITE
        } else if self.flags.contains(Flags::READONLY) {
            Access::READ
        } else {
            Access::READ_WRITE
        }
    }

    pub fn find_subcommand(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        self.subcommands
            .iter()
            .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
    }

    /// Calls `f` with each key of `req`, in order, where the table says
    /// they are (fixed positions, or the command's key finder), stopping
    /// at the first error: how cluster routing and `--maxmemory` find keys.
    pub fn try_for_each_key<'r, E>(
        &self,
        req: &'r Request<'_>,
        mut f: impl FnMut(&'r [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        match self.key_finder {
            Some(find) => {
                let args: Vec<&[u8]> = req.args().collect();
                for i in find(&args) {
                    f(req.arg(i))?;
                }
            }
            None => {
                for i in self.keys.positions(req.len()) {
                    f(req.arg(i))?;
                }
            }
        }
        Ok(())
    }

    /// The first key of `req`, if it has any.
    pub fn first_key<'r>(&self, req: &'r Request<'_>) -> Option<&'r [u8]> {
        let mut first = None;
        let _ = self.try_for_each_key(req, |k| {
            first = Some(k);
            Err(())
        });
        first
    }
}

/// Longest command name; anything longer is unknown without a lookup.
pub const MAX_NAME: usize = 32;

/// A resolved request: the command and, for a container, the subcommand.
pub type Resolved = (&'static CommandSpec, Option<&'static CommandSpec>);

/// Every command, found by name or position.
#[derive(Debug)]
pub struct Registry {
    commands: &'static [CommandSpec],
    index: HashMap<&'static [u8], &'static CommandSpec, ahash::RandomState>,
    /// Every command and subcommand by ACL id, with its categories.
    acl: crate::acl::Catalog,
}

impl Registry {
    pub fn new(commands: &'static [CommandSpec]) -> Registry {
        Registry {
            commands,
            index: commands.iter().map(|c| (c.name.as_bytes(), c)).collect(),
            acl: crate::acl::Catalog::new(commands.iter().map(|c| {
                let subs = c.subcommands.iter().map(|s| (s.name, s.categories()));
                (c.name, c.categories(), subs.collect())
            })),
        }
    }

    /// The commands as ACL rules name them.
    pub fn acl(&self) -> &crate::acl::Catalog {
        &self.acl
    }

    /// The ACL id of a resolved command (its subcommand's, if any).
    pub fn acl_id(&self, cmd: &'static CommandSpec, sub: Option<&'static CommandSpec>) -> usize {
        let i = self.index_of(cmd);
        self.acl.id(i, sub.map(|s| Self::sub_index_of(cmd, s)))
    }

    /// Every top-level command, in table order.
    pub fn commands(&self) -> &'static [CommandSpec] {
        self.commands
    }

    /// Position of a top-level command, for per-command counters and
    /// histograms.
    ///
    /// # Panics
    /// If `cmd` is not one of [`Registry::commands`] (a subcommand, say).
    pub fn index_of(&self, cmd: &'static CommandSpec) -> usize {
        let base = self.commands.as_ptr() as usize;
        let i = (cmd as *const CommandSpec as usize - base) / std::mem::size_of::<CommandSpec>();
        assert!(
            std::ptr::eq(&self.commands[i], cmd),
            "not a top-level command"
        );
        i
    }

    /// Position of `sub` among `cmd`'s subcommands.
    pub fn sub_index_of(cmd: &'static CommandSpec, sub: &'static CommandSpec) -> usize {
        let base = cmd.subcommands.as_ptr() as usize;
        let i = (sub as *const CommandSpec as usize - base) / std::mem::size_of::<CommandSpec>();
        assert!(
            std::ptr::eq(&cmd.subcommands[i], sub),
            "not a subcommand of {}",
            cmd.name
        );
        i
    }

    /// The command and subcommand at these positions (a transaction's
    /// queue holds positions).
    pub fn at(&self, cmd: usize, sub: Option<usize>) -> Option<Resolved> {
        let c = self.commands.get(cmd)?;
        match sub {
            Some(s) => Some((c, Some(c.subcommands.get(s)?))),
            None => Some((c, None)),
        }
    }

    /// What the counters and metrics need of the table: names by position
    /// and which commands write.
    pub fn catalog(&self) -> crate::stats::Catalog {
        crate::stats::Catalog {
            names: self.commands.iter().map(|c| c.name).collect(),
            writes: self
                .commands
                .iter()
                .map(|c| c.flags.contains(Flags::WRITE))
                .collect(),
        }
    }

    /// The name `CLIENT LIST` shows for a command and subcommand given by
    /// their positions (`client|info`), or `NULL`.
    pub fn full_name(&self, last: Option<(usize, Option<usize>)>) -> String {
        let Some(cmd) = last.and_then(|(c, _)| self.commands.get(c)) else {
            return "NULL".to_string();
        };
        match last
            .and_then(|(_, s)| s)
            .and_then(|s| cmd.subcommands.get(s))
        {
            Some(sub) => format!("{}|{}", cmd.name, sub.name),
            None => cmd.name.to_string(),
        }
    }

    /// Finds a command by its table name, case-insensitively, without
    /// allocating: the name is lower-cased into a stack buffer.
    pub fn lookup(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        if name.len() > MAX_NAME {
            return None;
        }
        let mut lower = [0u8; MAX_NAME];
        let lower = &mut lower[..name.len()];
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        self.index.get(&*lower).copied()
    }

    /// The command a client's name runs, `--rename-command` applied: a
    /// renamed command answers only to its new name, a disabled one to
    /// none.
    pub fn renamed(&self, renames: &Renames, name: &[u8]) -> Option<&'static CommandSpec> {
        if renames.by_name.is_empty() {
            return self.lookup(name);
        }
        // Lower-case into a stack buffer, as the table's own lookup does.
        let mut buf = [0u8; 64];
        let lower = buf.get_mut(..name.len())?;
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        match renames.by_name.get(&*lower) {
            Some(renamed) => renamed.and_then(|i| self.commands.get(i)),
            None => self.lookup(name),
        }
    }

    /// The command (or subcommand) a request names, checked for arity, as
    /// Redis's `lookupCommand` + arity check resolve it.
    pub fn resolve(&self, req: &Request<'_>) -> Result<Resolved, CmdError> {
        resolve_args(req.len(), |i| req.arg(i), |n| self.lookup(n))
    }

    /// As [`Registry::resolve`], renames applied.
    pub fn resolve_renamed(
        &self,
        renames: &Renames,
        req: &Request<'_>,
    ) -> Result<Resolved, CmdError> {
        resolve_args(req.len(), |i| req.arg(i), |n| self.renamed(renames, n))
    }

    /// As [`Registry::resolve_renamed`], through a memo of the last name
    /// found: a connection names the same few commands again and again,
    /// and comparing the name's bytes with the last one costs a fraction
    /// of lower-casing and hashing it (callgrind: 124 instructions a
    /// request against 257). The renames are fixed at start, so a name's
    /// command is a function of its bytes; a name that found nothing is
    /// not kept.
    pub fn resolve_remembered(
        &self,
        renames: &Renames,
        memo: &mut ArgsMemo<usize>,
        req: &Request<'_>,
    ) -> Result<Resolved, CmdError> {
        let found = match memo.get(req, 0..1).and_then(|i| self.commands.get(i)) {
            Some(cmd) => Some(cmd),
            None => {
                let found = self.renamed(renames, req.arg(0));
                if let Some(cmd) = found {
                    memo.put(req, 0..1, self.index_of(cmd));
                }
                found
            }
        };
        resolve_args(req.len(), |i| req.arg(i), |_| found)
    }

    /// As [`Registry::resolve`], for arguments held in a slice (`COMMAND
    /// GETKEYS`).
    pub fn resolve_in(&self, args: &[&[u8]]) -> Result<Resolved, CmdError> {
        if args.is_empty() {
            return Err(CmdError::WrongArity(String::new()));
        }
        resolve_args(args.len(), |i| args[i], |n| self.lookup(n))
    }
}

fn resolve_args<'a>(
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
    find: impl Fn(&[u8]) -> Option<&'static CommandSpec>,
) -> Result<Resolved, CmdError> {
    let Some(cmd) = find(arg(0)) else {
        return Err(unknown_command(argc, arg));
    };
    if !cmd.subcommands.is_empty() && argc >= 2 {
        let Some(sub) = cmd.find_subcommand(arg(1)) else {
            return Err(CmdError::UnknownSubcommand {
                sub: show(arg(1)),
                cmd: cmd.name.to_ascii_uppercase(),
            });
        };
        if !sub.arity_ok(argc) {
            return Err(CmdError::WrongArity(format!("{}|{}", cmd.name, sub.name)));
        }
        return Ok((cmd, Some(sub)));
    }
    if !cmd.arity_ok(argc) {
        return Err(CmdError::WrongArity(cmd.name.to_string()));
    }
    Ok((cmd, None))
}

/// Redis's wording: the name, then up to 128 bytes of arguments, each
/// quoted and followed by a space.
fn unknown_command<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8]) -> CmdError {
    let mut args = String::new();
    for i in 1..argc {
        if args.len() >= 128 {
            break;
        }
        let a = arg(i);
        let room = 128 - args.len();
        args.push('\'');
        args.push_str(&String::from_utf8_lossy(&a[..a.len().min(room)]));
        args.push_str("' ");
    }
    CmdError::UnknownCommand {
        name: show(arg(0)),
        args,
    }
}
