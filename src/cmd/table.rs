//! The command table: the one place that says which commands exist, their
//! arity, flags and key positions, and which function runs them. Dispatch,
//! arity errors, `COMMAND` and (later) cluster routing all read it.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::CmdError;
use super::{
    client, cluster, command, config, connection, keys, limiter, multi, server, snapshot, string,
    Ctx,
};
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

    const NAMES: [(Flags, &'static str); 11] = [
        (Flags::WRITE, "write"),
        (Flags::READONLY, "readonly"),
        (Flags::DENYOOM, "denyoom"),
        (Flags::ADMIN, "admin"),
        (Flags::NOSCRIPT, "noscript"),
        (Flags::LOADING, "loading"),
        (Flags::STALE, "stale"),
        (Flags::FAST, "fast"),
        (Flags::NO_AUTH, "no_auth"),
        (Flags::MOVABLEKEYS, "movablekeys"),
        (Flags::NO_MULTI, "no_multi"),
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

macro_rules! flags {
    () => { Flags::empty() };
    ($first:ident $(| $rest:ident)*) => { Flags::$first$(.with(Flags::$rest))* };
}

macro_rules! cmd {
    ($name:literal, $arity:expr, [$($flag:ident)|*], $keys:ident, $group:literal, $since:literal, $complexity:literal, $summary:literal, $handler:expr) => {
        cmd!($name, $arity, [$($flag)|*], $keys, $group, $since, $complexity, $summary, $handler, &[])
    };
    ($name:literal, $arity:expr, [$($flag:ident)|*], $keys:ident, $group:literal, $since:literal, $complexity:literal, $summary:literal, $handler:expr, $subs:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: flags!($($flag)|*),
            keys: KeySpec::$keys,
            group: $group,
            since: $since,
            complexity: $complexity,
            summary: $summary,
            handler: $handler,
            subcommands: $subs,
            key_finder: None,
        }
    };
}

/// Runs the subcommand chosen by the dispatcher; a container's own handler
/// is only reached with no subcommand word.
fn container_without_subcommand(_: &mut Ctx<'_>, _: &Request<'_>) -> Result<(), CmdError> {
    Err(CmdError::err("a container command needs a subcommand"))
}

static CLIENT_SUBCOMMANDS: [CommandSpec; 8] = [
    cmd!(
        "getname",
        2,
        [NOSCRIPT | LOADING | STALE],
        NONE,
        "connection",
        "2.6.9",
        "O(1)",
        "Returns the name of the connection.",
        client::getname
    ),
    cmd!(
        "help",
        2,
        [LOADING | STALE],
        NONE,
        "connection",
        "5.0.0",
        "O(1)",
        "Returns helpful text about the different subcommands.",
        client::help
    ),
    cmd!(
        "id",
        2,
        [NOSCRIPT | LOADING | STALE],
        NONE,
        "connection",
        "5.0.0",
        "O(1)",
        "Returns the unique client ID of the connection.",
        client::id
    ),
    cmd!(
        "info",
        2,
        [NOSCRIPT | LOADING | STALE],
        NONE,
        "connection",
        "6.2.0",
        "O(1)",
        "Returns information about the connection.",
        client::info
    ),
    cmd!(
        "kill",
        -3,
        [ADMIN | NOSCRIPT | LOADING | STALE | DANGEROUS],
        NONE,
        "connection",
        "2.4.0",
        "O(N) where N is the number of client connections",
        "Terminates open connections.",
        client::kill
    ),
    cmd!(
        "list",
        -2,
        [ADMIN | NOSCRIPT | LOADING | STALE | DANGEROUS],
        NONE,
        "connection",
        "2.4.0",
        "O(N) where N is the number of client connections",
        "Lists open connections.",
        client::list
    ),
    cmd!(
        "setinfo",
        4,
        [NOSCRIPT | LOADING | STALE],
        NONE,
        "connection",
        "7.2.0",
        "O(1)",
        "Sets information specific to the client or connection.",
        client::setinfo
    ),
    cmd!(
        "setname",
        3,
        [NOSCRIPT | LOADING | STALE],
        NONE,
        "connection",
        "2.6.9",
        "O(1)",
        "Sets the connection name.",
        client::setname
    ),
];

static CLUSTER_SUBCOMMANDS: [CommandSpec; 9] = [
    cmd!(
        "countkeysinslot",
        3,
        [STALE | ALL_KEYS],
        NONE,
        "cluster",
        "3.0.0",
        "O(1)",
        "Returns the number of keys in a hash slot.",
        cluster::countkeysinslot
    ),
    cmd!(
        "getkeysinslot",
        4,
        [STALE | ALL_KEYS],
        NONE,
        "cluster",
        "3.0.0",
        "O(N) where N is the number of requested keys",
        "Returns the key names in a hash slot.",
        cluster::getkeysinslot
    ),
    cmd!(
        "help",
        2,
        [LOADING | STALE],
        NONE,
        "cluster",
        "5.0.0",
        "O(1)",
        "Returns helpful text about the different subcommands.",
        cluster::help
    ),
    cmd!(
        "info",
        2,
        [STALE],
        NONE,
        "cluster",
        "3.0.0",
        "O(1)",
        "Returns information about the state of a node.",
        cluster::info
    ),
    cmd!(
        "keyslot",
        3,
        [STALE],
        NONE,
        "cluster",
        "3.0.0",
        "O(N) where N is the number of bytes in the key",
        "Returns the hash slot for a key.",
        cluster::keyslot
    ),
    cmd!(
        "myid",
        2,
        [STALE],
        NONE,
        "cluster",
        "3.0.0",
        "O(1)",
        "Returns the ID of a node.",
        cluster::myid
    ),
    cmd!(
        "nodes",
        2,
        [STALE],
        NONE,
        "cluster",
        "3.0.0",
        "O(N) where N is the total number of Cluster nodes",
        "Returns the cluster configuration for a node.",
        cluster::nodes
    ),
    cmd!(
        "shards",
        2,
        [LOADING | STALE],
        NONE,
        "cluster",
        "7.0.0",
        "O(N) where N is the total number of cluster nodes",
        "Returns the mapping of cluster slots to shards.",
        cluster::shards
    ),
    cmd!(
        "slots",
        2,
        [LOADING | STALE],
        NONE,
        "cluster",
        "3.0.0",
        "O(N) where N is the total number of Cluster nodes",
        "Returns the mapping of cluster slots to nodes.",
        cluster::slots
    ),
];

static COMMAND_SUBCOMMANDS: [CommandSpec; 6] = [
    cmd!(
        "count",
        2,
        [LOADING | STALE],
        NONE,
        "server",
        "2.8.13",
        "O(1)",
        "Returns a count of commands.",
        command::count
    ),
    cmd!(
        "docs",
        -2,
        [LOADING | STALE],
        NONE,
        "server",
        "7.0.0",
        "O(N) where N is the number of commands to look up",
        "Returns documentary information about one, multiple or all commands.",
        command::docs
    ),
    cmd!(
        "getkeys",
        -3,
        [LOADING | STALE],
        NONE,
        "server",
        "2.8.13",
        "O(N) where N is the number of arguments to the command",
        "Extracts the key names from an arbitrary command.",
        command::getkeys
    ),
    cmd!(
        "help",
        2,
        [LOADING | STALE],
        NONE,
        "server",
        "5.0.0",
        "O(1)",
        "Returns helpful text about the different subcommands.",
        command::help
    ),
    cmd!(
        "info",
        -2,
        [LOADING | STALE],
        NONE,
        "server",
        "2.8.13",
        "O(N) where N is the number of commands to look up",
        "Returns information about one, multiple or all commands.",
        command::info
    ),
    cmd!(
        "list",
        -2,
        [LOADING | STALE],
        NONE,
        "server",
        "7.0.0",
        "O(N) where N is the total number of commands",
        "Returns a list of command names.",
        command::list
    ),
];

static CONFIG_SUBCOMMANDS: [CommandSpec; 4] = [
    cmd!(
        "get",
        -3,
        [ADMIN | NOSCRIPT | LOADING | STALE],
        NONE,
        "server",
        "2.0.0",
        "O(N) when N is the number of configuration parameters provided",
        "Returns the effective values of configuration parameters.",
        config::get
    ),
    cmd!(
        "help",
        2,
        [LOADING | STALE],
        NONE,
        "server",
        "5.0.0",
        "O(1)",
        "Returns helpful text about the different subcommands.",
        config::help
    ),
    cmd!(
        "resetstat",
        2,
        [ADMIN | NOSCRIPT | LOADING | STALE],
        NONE,
        "server",
        "2.0.0",
        "O(1)",
        "Resets the server's statistics.",
        config::resetstat
    ),
    cmd!(
        "set",
        -4,
        [ADMIN | NOSCRIPT | LOADING | STALE],
        NONE,
        "server",
        "2.0.0",
        "O(N) when N is the number of configuration parameters provided",
        "Sets configuration parameters in-flight.",
        config::set
    ),
];

/// Every command, in alphabetical order.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("asking", 1, [FAST], NONE, "cluster", "3.0.0", "O(1)", "Signals that a cluster client is following an -ASK redirect.", cluster::accept),
    cmd!("auth", -2, [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH], NONE, "connection", "1.0.0", "O(N) where N is the number of passwords defined for the user", "Authenticates the connection.", connection::auth),
    cmd!("bgsave", -1, [ADMIN | NOSCRIPT], NONE, "server", "1.0.0", "O(1)", "Asynchronously saves the database(s) to disk.", snapshot::bgsave),
    cmd!("cl.throttle", -5, [WRITE | DENYOOM | FAST], FIRST, "limiter", "0.1.0", "O(1)", "Admits or denies a request as redis-cell's GCRA does.", limiter::throttle),
    cmd!("client", -2, [], NONE, "connection", "2.4.0", "Depends on subcommand.", "A container for client connection commands.", container_without_subcommand, &CLIENT_SUBCOMMANDS),
    cmd!("cluster", -2, [], NONE, "cluster", "3.0.0", "Depends on subcommand.", "A container for Redis Cluster commands.", container_without_subcommand, &CLUSTER_SUBCOMMANDS),
    cmd!("command", -1, [LOADING | STALE], NONE, "server", "2.8.13", "O(N) where N is the total number of Redis commands", "Returns detailed information about all commands.", command::all, &COMMAND_SUBCOMMANDS),
    cmd!("config", -2, [], NONE, "server", "2.0.0", "Depends on subcommand.", "A container for server configuration commands.", container_without_subcommand, &CONFIG_SUBCOMMANDS),
    cmd!("dbsize", 1, [READONLY | FAST | ALL_KEYS], NONE, "server", "1.0.0", "O(1)", "Returns the number of keys in the database.", server::dbsize),
    cmd!("decr", 2, [WRITE | DENYOOM | FAST], FIRST, "string", "1.0.0", "O(1)", "Decrements the integer value of a key by one.", string::decr),
    cmd!("decrby", 3, [WRITE | DENYOOM | FAST], FIRST, "string", "1.0.0", "O(1)", "Decrements a number from the integer value of a key.", string::decrby),
    cmd!("del", -2, [WRITE], ALL, "generic", "1.0.0", "O(N) where N is the number of keys that will be removed", "Deletes one or more keys.", keys::del),
    cmd!("discard", 1, [NOSCRIPT | LOADING | STALE | FAST | NOT_QUEUED], NONE, "transactions", "2.0.0", "O(N), when N is the number of queued commands", "Discards a transaction.", multi::discard),
    cmd!("echo", 2, [FAST], NONE, "connection", "1.0.0", "O(1)", "Returns the given string.", connection::echo),
    cmd!("exec", 1, [NOSCRIPT | LOADING | STALE | NOT_QUEUED], NONE, "transactions", "1.2.0", "Depends on commands in the transaction", "Executes all commands in a transaction.", multi::exec),
    cmd!("exists", -2, [READONLY | FAST], ALL, "generic", "1.0.0", "O(N) where N is the number of keys to check", "Determines whether one or more keys exist.", keys::exists),
    cmd!("expire", -3, [WRITE | FAST], FIRST, "generic", "1.0.0", "O(1)", "Sets the expiration time of a key in seconds.", keys::expire),
    cmd!("expireat", -3, [WRITE | FAST], FIRST, "generic", "1.2.0", "O(1)", "Sets the expiration time of a key to a Unix timestamp.", keys::expireat),
    cmd!("expiretime", 2, [READONLY | FAST], FIRST, "generic", "7.0.0", "O(1)", "Returns the expiration time of a key as a Unix timestamp.", keys::expiretime),
    cmd!("flushall", -1, [WRITE | DANGEROUS | ALL_KEYS], NONE, "server", "1.0.0", "O(N) where N is the total number of keys in all databases", "Removes all keys from all databases.", server::flushall),
    cmd!("flushdb", -1, [WRITE | DANGEROUS | ALL_KEYS], NONE, "server", "1.0.0", "O(N) where N is the number of keys in the selected database", "Remove all keys from the current database.", server::flushall),
    cmd!("get", 2, [READONLY | FAST], FIRST, "string", "1.0.0", "O(1)", "Returns the string value of a key.", string::get),
    cmd!("getdel", 2, [WRITE | FAST], FIRST, "string", "6.2.0", "O(1)", "Returns the string value of a key after deleting the key.", string::getdel),
    cmd!("getex", -2, [WRITE | FAST], FIRST, "string", "6.2.0", "O(1)", "Returns the string value of a key after setting its expiration time.", string::getex),
    cmd!("hello", -1, [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH], NONE, "connection", "6.0.0", "O(1)", "Handshakes with the Redis server.", connection::hello),
    cmd!("incr", 2, [WRITE | DENYOOM | FAST], FIRST, "string", "1.0.0", "O(1)", "Increments the integer value of a key by one.", string::incr),
    cmd!("incrby", 3, [WRITE | DENYOOM | FAST], FIRST, "string", "1.0.0", "O(1)", "Increments the integer value of a key by a number.", string::incrby),
    cmd!("incrbyfloat", 3, [WRITE | DENYOOM | FAST], FIRST, "string", "2.6.0", "O(1)", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", string::incrbyfloat),
    cmd!("info", -1, [LOADING | STALE | ALL_KEYS], NONE, "server", "1.0.0", "O(1)", "Returns information and statistics about the server.", server::info),
    cmd!("keys", 2, [READONLY | ALL_KEYS], NONE, "generic", "1.0.0", "O(N) with N being the number of keys in the database", "Returns all key names that match a pattern.", keys::keys),
    cmd!("lastsave", 1, [LOADING | STALE | FAST], NONE, "server", "1.0.0", "O(1)", "Returns the Unix timestamp of the last successful save to disk.", snapshot::lastsave),
    cmd!("mget", -2, [READONLY | FAST], ALL, "string", "1.0.0", "O(N) where N is the number of keys to retrieve.", "Atomically returns the string values of one or more keys.", string::mget),
    cmd!("mset", -3, [WRITE | DENYOOM], PAIRS, "string", "1.0.1", "O(N) where N is the number of keys to set.", "Atomically creates or modifies the string values of one or more keys.", string::mset),
    cmd!("multi", 1, [NOSCRIPT | LOADING | STALE | FAST | NOT_QUEUED], NONE, "transactions", "1.2.0", "O(1)", "Starts a transaction.", multi::multi),
    cmd!("persist", 2, [WRITE | FAST], FIRST, "generic", "2.2.0", "O(1)", "Removes the expiration time of a key.", keys::persist),
    cmd!("pexpire", -3, [WRITE | FAST], FIRST, "generic", "2.6.0", "O(1)", "Sets the expiration time of a key in milliseconds.", keys::pexpire),
    cmd!("pexpireat", -3, [WRITE | FAST], FIRST, "generic", "2.6.0", "O(1)", "Sets the expiration time of a key to a Unix milliseconds timestamp.", keys::pexpireat),
    cmd!("pexpiretime", 2, [READONLY | FAST], FIRST, "generic", "7.0.0", "O(1)", "Returns the expiration time of a key as a Unix milliseconds timestamp.", keys::pexpiretime),
    cmd!("ping", -1, [FAST], NONE, "connection", "1.0.0", "O(1)", "Returns the server's liveliness response.", connection::ping),
    cmd!("psetex", 4, [WRITE | DENYOOM], FIRST, "string", "2.6.0", "O(1)", "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", string::psetex),
    cmd!("pttl", 2, [READONLY | FAST], FIRST, "generic", "2.6.0", "O(1)", "Returns the expiration time in milliseconds of a key.", keys::pttl),
    cmd!("quit", -1, [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | NOT_QUEUED], NONE, "connection", "1.0.0", "O(1)", "Closes the connection.", connection::quit),
    cmd!("readonly", 1, [LOADING | STALE | FAST], NONE, "cluster", "3.0.0", "O(1)", "Enables read-only queries for a connection to a Redis Cluster replica node.", cluster::accept),
    cmd!("readwrite", 1, [LOADING | STALE | FAST], NONE, "cluster", "3.0.0", "O(1)", "Enables read-write queries for a connection to a Redis Cluster replica node.", cluster::accept),
    cmd!("rename", 3, [WRITE], FIRST_TWO, "generic", "1.0.0", "O(1)", "Renames a key and overwrites the destination.", keys::rename),
    cmd!("renamenx", 3, [WRITE | FAST], FIRST_TWO, "generic", "1.0.0", "O(1)", "Renames a key only when the target key name doesn't exist.", keys::renamenx),
    cmd!("reset", 1, [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | NOT_QUEUED], NONE, "connection", "6.2.0", "O(1)", "Resets the connection.", connection::reset),
    cmd!("rl.allow", -4, [WRITE | DENYOOM | FAST], FIRST, "limiter", "0.1.0", "O(1); ALGO log: O(slots expired)", "Admits or denies a request against a limit, atomically.", limiter::allow),
    CommandSpec {
        key_finder: Some(limiter::parse::many_keys),
        ..cmd!("rl.allowmany", -5, [WRITE | DENYOOM | MOVABLEKEYS], NONE, "limiter", "0.1.0", "O(N) where N is the number of limits", "Admits a request only if every one of several limits admits it.", limiter::allowmany)
    },
    cmd!("rl.peek", -4, [READONLY | FAST], FIRST, "limiter", "0.1.0", "O(1); ALGO log: O(slots)", "Returns what RL.ALLOW would answer, consuming nothing.", limiter::peek),
    cmd!("rl.refund", 3, [WRITE | FAST], FIRST, "limiter", "0.1.0", "O(1); ALGO log: O(slots refunded)", "Gives back units charged earlier.", limiter::refund),
    cmd!("rl.reset", -2, [WRITE], ALL, "limiter", "0.1.0", "O(N) where N is the number of keys", "Forgets the limiter state of keys.", limiter::reset),
    cmd!("rl.state", 2, [READONLY | FAST], FIRST, "limiter", "0.1.0", "O(1)", "Describes a limiter key's state.", limiter::state),
    cmd!("save", 1, [ADMIN | NOSCRIPT | NO_MULTI], NONE, "server", "1.0.0", "O(N) where N is the total number of keys in all databases", "Synchronously saves the database(s) to disk.", snapshot::save),
    cmd!("scan", -2, [READONLY | ALL_KEYS], NONE, "generic", "2.8.0", "O(1) for every call. O(N) for a complete iteration.", "Iterates over the key names in the database.", keys::scan),
    cmd!("select", 2, [LOADING | STALE | FAST], NONE, "connection", "1.0.0", "O(1)", "Changes the selected database.", connection::select),
    cmd!("set", -3, [WRITE | DENYOOM], FIRST, "string", "1.0.0", "O(1)", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", string::set),
    cmd!("setex", 4, [WRITE | DENYOOM], FIRST, "string", "2.0.0", "O(1)", "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.", string::setex),
    cmd!("setnx", 3, [WRITE | DENYOOM | FAST], FIRST, "string", "1.0.0", "O(1)", "Set the string value of a key only when the key doesn't exist.", string::setnx),
    cmd!("time", 1, [LOADING | STALE | FAST], NONE, "server", "2.6.0", "O(1)", "Returns the server time.", server::time),
    cmd!("ttl", 2, [READONLY | FAST], FIRST, "generic", "1.0.0", "O(1)", "Returns the expiration time in seconds of a key.", keys::ttl),
    cmd!("type", 2, [READONLY | FAST], FIRST, "generic", "1.0.0", "O(1)", "Determines the type of value stored at a key.", keys::type_),
    cmd!("unlink", -2, [WRITE | FAST], ALL, "generic", "4.0.0", "O(1) for each key removed regardless of its size.", "Asynchronously deletes one or more keys.", keys::del),
    cmd!("unwatch", 1, [NOSCRIPT | LOADING | STALE | FAST], NONE, "transactions", "2.2.0", "O(1)", "Forgets about watched keys of a transaction.", multi::unwatch),
    cmd!("watch", -2, [NOSCRIPT | LOADING | STALE | FAST | NOT_QUEUED], ALL, "transactions", "2.2.0", "O(1) for every key.", "Monitors changes to keys to determine the execution of a transaction.", multi::watch),
];

/// Position of a top-level command in [`COMMANDS`], for per-command
/// counters and histograms.
///
/// # Panics
/// If `cmd` is not an element of `COMMANDS` (a subcommand, say).
pub fn index_of(cmd: &'static CommandSpec) -> usize {
    let base = COMMANDS.as_ptr() as usize;
    let i = (cmd as *const CommandSpec as usize - base) / std::mem::size_of::<CommandSpec>();
    assert!(std::ptr::eq(&COMMANDS[i], cmd), "not a top-level command");
    i
}

/// What the counters and metrics need of the table: names by position and
/// which commands write.
pub fn catalog() -> crate::stats::Catalog {
    crate::stats::Catalog {
        names: COMMANDS.iter().map(|c| c.name).collect(),
        writes: COMMANDS
            .iter()
            .map(|c| c.flags.contains(Flags::WRITE))
            .collect(),
    }
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

/// The name `CLIENT LIST` shows for a command and subcommand given by
/// their positions (`client|info`), or `NULL`.
pub fn full_name(last: Option<(usize, Option<usize>)>) -> String {
    let Some(cmd) = last.and_then(|(c, _)| COMMANDS.get(c)) else {
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

/// Longest command name; anything longer is unknown without a lookup.
const MAX_NAME: usize = 32;

static INDEX: LazyLock<HashMap<&'static [u8], &'static CommandSpec, ahash::RandomState>> =
    LazyLock::new(|| COMMANDS.iter().map(|c| (c.name.as_bytes(), c)).collect());

/// Finds a command by name, case-insensitively, without allocating: the
/// name is lower-cased into a stack buffer.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    if name.len() > MAX_NAME {
        return None;
    }
    let mut lower = [0u8; MAX_NAME];
    let lower = &mut lower[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    INDEX.get(&*lower).copied()
}

/// The command (or subcommand) a request names, checked for arity, as
/// Redis's `lookupCommand` + arity check resolve it.
pub fn resolve(
    req: &Request<'_>,
) -> Result<(&'static CommandSpec, Option<&'static CommandSpec>), CmdError> {
    resolve_args(req.len(), |i| req.arg(i), lookup)
}

/// As [`resolve`], finding the command name with `find` (renames applied).
pub fn resolve_with(
    req: &Request<'_>,
    find: impl Fn(&[u8]) -> Option<&'static CommandSpec>,
) -> Result<(&'static CommandSpec, Option<&'static CommandSpec>), CmdError> {
    resolve_args(req.len(), |i| req.arg(i), find)
}

/// As [`resolve`], for arguments held in a slice (`COMMAND GETKEYS`).
pub fn resolve_in(
    args: &[&[u8]],
) -> Result<(&'static CommandSpec, Option<&'static CommandSpec>), CmdError> {
    if args.is_empty() {
        return Err(CmdError::WrongArity(String::new()));
    }
    resolve_args(args.len(), |i| args[i], lookup)
}

fn resolve_args<'a>(
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
    find: impl Fn(&[u8]) -> Option<&'static CommandSpec>,
) -> Result<(&'static CommandSpec, Option<&'static CommandSpec>), CmdError> {
    let Some(cmd) = find(arg(0)) else {
        return Err(unknown_command(argc, arg));
    };
    if !cmd.subcommands.is_empty() && argc >= 2 {
        let Some(sub) = cmd.find_subcommand(arg(1)) else {
            return Err(CmdError::UnknownSubcommand {
                sub: super::error::show(arg(1)),
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
        name: super::error::show(arg(0)),
        args,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_unique_and_lowercase() {
        for pair in COMMANDS.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
        for c in COMMANDS {
            assert_eq!(c.name, c.name.to_ascii_lowercase());
            assert!(c.name.len() <= MAX_NAME);
            assert!(c.arity != 0);
        }
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup(b"GeT").unwrap().name, "get");
        assert!(lookup(b"nope").is_none());
        assert!(lookup(&[b'a'; 100]).is_none());
    }

    #[test]
    fn key_positions() {
        assert_eq!(KeySpec::FIRST.positions(3).collect::<Vec<_>>(), vec![1]);
        assert_eq!(KeySpec::ALL.positions(4).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(KeySpec::PAIRS.positions(5).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(
            KeySpec::FIRST_TWO.positions(3).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(KeySpec::NONE.positions(5).count(), 0);
    }
}
