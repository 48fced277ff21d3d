//! What a command is: its name, arity, flags, key positions, documentation
//! and handler (`CommandSpec`), as `COMMAND` reports it. The table of every
//! command is `table.rs`.

use super::CmdError;
use super::Ctx;
use crate::protocol::Request;

pub type Handler = fn(&mut Ctx<'_>, &Request<'_>) -> Result<(), CmdError>;

/// Finds the key indexes of a request, for commands whose keys the
/// first/last/step triple cannot describe.
pub type KeyFinder = fn(&[&[u8]]) -> Vec<usize>;

/// Command flags, named as `COMMAND INFO` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags(u16);

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

    const NAMES: [(Flags, &'static str); 13] = [
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

    /// ACL categories implied by the flags, as Redis derives them.
    pub fn implied_categories(self) -> impl Iterator<Item = &'static str> {
        [
            (Flags::WRITE, "@write"),
            (Flags::READONLY, "@read"),
            (Flags::ADMIN, "@admin"),
            (Flags::FAST, "@fast"),
            (Flags::DANGEROUS, "@dangerous"),
        ]
        .into_iter()
        .filter(move |(f, _)| self.contains(*f))
        .map(|(_, n)| n)
        .chain((!self.contains(Flags::FAST)).then_some("@slow"))
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
