//! The command table: the one place that says which commands exist, their
//! arity, flags and key positions, and which function runs them, one
//! `cmd!` entry each with its fields named (the types are `spec.rs`).
//! Dispatch, arity errors, `COMMAND`, cluster routing, transactions and the
//! counters' catalogue all read it, through [`REGISTRY`]. The only file
//! that names every command family: nothing below imports it.

use std::sync::LazyLock;

use super::error::CmdError;
use super::spec::{CommandSpec, Ctx, Flags, KeySpec, Registry};
use crate::acl::CatSet;
use crate::cmd::admin::{
    acl, aof, client, cluster, command, config, connection, pubsub, replication, server, shutdown,
    snapshot,
};
use crate::cmd::data::{dump, hash, keys, list, string, zset};
use crate::cmd::exec::multi;
use crate::cmd::limit::{allow, charge, lease, parse, policy, throttle, top};
use crate::cmd::script;
use crate::protocol::Request;

macro_rules! flags {
    () => { Flags::empty() };
    ($first:ident $(| $rest:ident)*) => { Flags::$first$(.with(Flags::$rest))* };
}

/// One command, its fields named: `flags` as `[A | B]` of [`Flags`]
/// constants, `keys` a [`KeySpec`] constant, `subcommands` optional, `acl`
/// the ACL categories its flags do not imply (`[STRING | KEYSPACE]` of
/// [`CatSet`] constants; Redis 7.0's `acl_categories` for the commands
/// Redis has, `RATELIMIT` for every limiter command).
macro_rules! cmd {
    {
        name: $name:literal, arity: $arity:expr, flags: [$($flag:ident)|*], keys: $keys:ident,
        group: $group:literal, since: $since:literal, complexity: $complexity:literal,
        summary: $summary:literal, handler: $handler:expr $(, subcommands: $subs:expr)?
        $(, acl: [$($cat:ident)|*])? $(,)?
    } => {
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
            subcommands: cmd!(@subs $($subs)?),
            key_finder: None,
            acl: cmd!(@acl $([$($cat)|*])?),
        }
    };
    (@acl) => { CatSet::empty() };
    (@acl [$($cat:ident)|*]) => { CatSet::empty()$(.with(CatSet::$cat))* };
    (@subs) => { &[] };
    (@subs $subs:expr) => { $subs };
}

/// Runs the subcommand chosen by the dispatcher; a container's own handler
/// is only reached with no subcommand word.
fn container_without_subcommand(_: &mut Ctx<'_>, _: &Request<'_>) -> Result<(), CmdError> {
    Err(CmdError::err("a container command needs a subcommand"))
}

static ACL_SUBCOMMANDS: [CommandSpec; 13] = [
    cmd! { name: "cat", arity: -2, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(1) since the categories and commands are a fixed set.", summary: "Lists the ACL categories, or the commands inside a category.", handler: acl::cat },
    cmd! { name: "deluser", arity: -3, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(1) amortized time considering the typical user.", summary: "Deletes ACL users, and terminates their connections.", handler: acl::deluser },
    cmd! { name: "dryrun", arity: -4, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "7.0.0", complexity: "O(1).", summary: "Simulates the execution of a command by a user, without executing the command.", handler: acl::dryrun },
    cmd! { name: "genpass", arity: -2, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(1)", summary: "Generates a pseudorandom, secure password that can be used to identify ACL users.", handler: acl::genpass },
    cmd! { name: "getuser", arity: 3, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(N). Where N is the number of password, command and pattern rules that the user has.", summary: "Lists the ACL rules of a user.", handler: acl::getuser },
    cmd! { name: "help", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(1)", summary: "Returns helpful text about the different subcommands.", handler: acl::help },
    cmd! { name: "list", arity: 2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(N). Where N is the number of configured users.", summary: "Dumps the effective rules in ACL file format.", handler: acl::list },
    cmd! { name: "load", arity: 2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(N). Where N is the number of configured users.", summary: "Reloads the rules from the configured ACL file.", handler: acl::load },
    cmd! { name: "log", arity: -2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(N) with N being the number of entries shown.", summary: "Lists recent security events generated due to ACL rules.", handler: acl::log },
    cmd! { name: "save", arity: 2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(N). Where N is the number of configured users.", summary: "Saves the effective ACL rules in the configured ACL file.", handler: acl::save },
    cmd! { name: "setuser", arity: -3, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(N). Where N is the number of rules provided.", summary: "Creates and modifies an ACL user and its rules.", handler: acl::setuser },
    cmd! { name: "users", arity: 2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(N). Where N is the number of configured users.", summary: "Lists all ACL users.", handler: acl::users },
    cmd! { name: "whoami", arity: 2, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "6.0.0", complexity: "O(1)", summary: "Returns the authenticated username of the current connection.", handler: acl::whoami },
];

static CLIENT_SUBCOMMANDS: [CommandSpec; 8] = [
    cmd! { name: "getname", arity: 2, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "connection", since: "2.6.9", complexity: "O(1)", summary: "Returns the name of the connection.", handler: client::getname, acl: [CONNECTION] },
    cmd! { name: "help", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "connection", since: "5.0.0", complexity: "O(1)", summary: "Returns helpful text about the different subcommands.", handler: client::help, acl: [CONNECTION] },
    cmd! { name: "id", arity: 2, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "connection", since: "5.0.0", complexity: "O(1)", summary: "Returns the unique client ID of the connection.", handler: client::id, acl: [CONNECTION] },
    cmd! { name: "info", arity: 2, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "connection", since: "6.2.0", complexity: "O(1)", summary: "Returns information about the connection.", handler: client::info, acl: [CONNECTION] },
    cmd! { name: "kill", arity: -3, flags: [ADMIN | NOSCRIPT | LOADING | STALE | DANGEROUS], keys: NONE, group: "connection", since: "2.4.0", complexity: "O(N) where N is the number of client connections", summary: "Terminates open connections.", handler: client::kill, acl: [CONNECTION] },
    cmd! { name: "list", arity: -2, flags: [ADMIN | NOSCRIPT | LOADING | STALE | DANGEROUS], keys: NONE, group: "connection", since: "2.4.0", complexity: "O(N) where N is the number of client connections", summary: "Lists open connections.", handler: client::list, acl: [CONNECTION] },
    cmd! { name: "setinfo", arity: 4, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "connection", since: "7.2.0", complexity: "O(1)", summary: "Sets information specific to the client or connection.", handler: client::setinfo, acl: [CONNECTION] },
    cmd! { name: "setname", arity: 3, flags: [NOSCRIPT | LOADING | STALE], keys: NONE, group: "connection", since: "2.6.9", complexity: "O(1)", summary: "Sets the connection name.", handler: client::setname, acl: [CONNECTION] },
];

static CLUSTER_SUBCOMMANDS: [CommandSpec; 23] = [
    cmd! { name: "addslots", arity: -3, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the total number of hash slot arguments", summary: "Assigns new hash slots to a node.", handler: cluster::live },
    cmd! { name: "addslotsrange", arity: -4, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "7.0.0", complexity: "O(N) where N is the total number of the slots between the start slot and end slot arguments.", summary: "Assigns new hash slot ranges to a node.", handler: cluster::live },
    cmd! { name: "bumpepoch", arity: 2, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Advances the cluster config epoch.", handler: cluster::live },
    cmd! { name: "count-failure-reports", arity: 3, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the number of failure reports", summary: "Returns the number of active failure reports active for a node.", handler: cluster::live },
    cmd! { name: "countkeysinslot", arity: 3, flags: [STALE | ALL_KEYS], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Returns the number of keys in a hash slot.", handler: cluster::countkeysinslot },
    cmd! { name: "delslots", arity: -3, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the total number of hash slot arguments", summary: "Sets hash slots as unbound for a node.", handler: cluster::live },
    cmd! { name: "delslotsrange", arity: -4, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "7.0.0", complexity: "O(N) where N is the total number of the slots between the start slot and end slot arguments.", summary: "Sets hash slot ranges as unbound for a node.", handler: cluster::live },
    cmd! { name: "failover", arity: -2, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Forces a replica to perform a manual failover of its master.", handler: cluster::live },
    cmd! { name: "forget", arity: 3, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Removes a node from the nodes table.", handler: cluster::live },
    cmd! { name: "getkeysinslot", arity: 4, flags: [STALE | ALL_KEYS], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the number of requested keys", summary: "Returns the key names in a hash slot.", handler: cluster::getkeysinslot },
    cmd! { name: "help", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "cluster", since: "5.0.0", complexity: "O(1)", summary: "Returns helpful text about the different subcommands.", handler: cluster::help },
    cmd! { name: "info", arity: 2, flags: [STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Returns information about the state of a node.", handler: cluster::info },
    cmd! { name: "keyslot", arity: 3, flags: [STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the number of bytes in the key", summary: "Returns the hash slot for a key.", handler: cluster::keyslot },
    cmd! { name: "meet", arity: -4, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Forces a node to handshake with another node.", handler: cluster::live },
    cmd! { name: "myid", arity: 2, flags: [STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Returns the ID of a node.", handler: cluster::myid },
    cmd! { name: "nodes", arity: 2, flags: [STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the total number of Cluster nodes", summary: "Returns the cluster configuration for a node.", handler: cluster::nodes },
    cmd! { name: "replicate", arity: 3, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Configure a node as replica of a master node.", handler: cluster::live },
    cmd! { name: "reset", arity: -2, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the number of known nodes. The command may execute a FLUSHALL as a side effect.", summary: "Resets a node.", handler: cluster::live },
    cmd! { name: "saveconfig", arity: 2, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Forces a node to save the cluster configuration to disk.", handler: cluster::live },
    cmd! { name: "set-config-epoch", arity: 3, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Sets the configuration epoch for a new node.", handler: cluster::live },
    cmd! { name: "setslot", arity: -4, flags: [ADMIN | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Binds a hash slot to a node.", handler: cluster::live },
    cmd! { name: "shards", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "cluster", since: "7.0.0", complexity: "O(N) where N is the total number of cluster nodes", summary: "Returns the mapping of cluster slots to shards.", handler: cluster::shards },
    cmd! { name: "slots", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(N) where N is the total number of Cluster nodes", summary: "Returns the mapping of cluster slots to nodes.", handler: cluster::slots },
];

static COMMAND_SUBCOMMANDS: [CommandSpec; 6] = [
    cmd! { name: "count", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "server", since: "2.8.13", complexity: "O(1)", summary: "Returns a count of commands.", handler: command::count, acl: [CONNECTION] },
    cmd! { name: "docs", arity: -2, flags: [LOADING | STALE], keys: NONE, group: "server", since: "7.0.0", complexity: "O(N) where N is the number of commands to look up", summary: "Returns documentary information about one, multiple or all commands.", handler: command::docs, acl: [CONNECTION] },
    cmd! { name: "getkeys", arity: -3, flags: [LOADING | STALE], keys: NONE, group: "server", since: "2.8.13", complexity: "O(N) where N is the number of arguments to the command", summary: "Extracts the key names from an arbitrary command.", handler: command::getkeys, acl: [CONNECTION] },
    cmd! { name: "help", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "server", since: "5.0.0", complexity: "O(1)", summary: "Returns helpful text about the different subcommands.", handler: command::help, acl: [CONNECTION] },
    cmd! { name: "info", arity: -2, flags: [LOADING | STALE], keys: NONE, group: "server", since: "2.8.13", complexity: "O(N) where N is the number of commands to look up", summary: "Returns information about one, multiple or all commands.", handler: command::info, acl: [CONNECTION] },
    cmd! { name: "list", arity: -2, flags: [LOADING | STALE], keys: NONE, group: "server", since: "7.0.0", complexity: "O(N) where N is the total number of commands", summary: "Returns a list of command names.", handler: command::list, acl: [CONNECTION] },
];

static CONFIG_SUBCOMMANDS: [CommandSpec; 5] = [
    cmd! { name: "get", arity: -3, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "2.0.0", complexity: "O(N) when N is the number of configuration parameters provided", summary: "Returns the effective values of configuration parameters.", handler: config::get },
    cmd! { name: "help", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "server", since: "5.0.0", complexity: "O(1)", summary: "Returns helpful text about the different subcommands.", handler: config::help },
    cmd! { name: "resetstat", arity: 2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "2.0.0", complexity: "O(1)", summary: "Resets the server's statistics.", handler: config::resetstat },
    cmd! { name: "rewrite", arity: 2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "2.8.0", complexity: "O(1)", summary: "Persists the effective configuration to file.", handler: config::rewrite },
    cmd! { name: "set", arity: -4, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "2.0.0", complexity: "O(N) when N is the number of configuration parameters provided", summary: "Sets configuration parameters in-flight.", handler: config::set },
];

static SCRIPT_SUBCOMMANDS: [CommandSpec; 5] = [
    cmd! { name: "exists", arity: -3, flags: [NOSCRIPT], keys: NONE, group: "scripting", since: "2.6.0", complexity: "O(N) with N being the number of scripts to check (so checking a single script is an O(1) operation).", summary: "Determines whether server-side Lua scripts exist in the script cache.", handler: script::exists, acl: [SCRIPTING] },
    cmd! { name: "flush", arity: -2, flags: [NOSCRIPT], keys: NONE, group: "scripting", since: "2.6.0", complexity: "O(N) with N being the number of scripts in cache", summary: "Removes all server-side Lua scripts from the script cache.", handler: script::flush, acl: [SCRIPTING] },
    cmd! { name: "help", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "scripting", since: "5.0.0", complexity: "O(1)", summary: "Returns helpful text about the different subcommands.", handler: script::help, acl: [SCRIPTING] },
    cmd! { name: "kill", arity: 2, flags: [NOSCRIPT | ALLOW_BUSY], keys: NONE, group: "scripting", since: "2.6.0", complexity: "O(1)", summary: "Terminates a server-side Lua script during execution.", handler: script::kill, acl: [SCRIPTING] },
    cmd! { name: "load", arity: 3, flags: [NOSCRIPT | STALE], keys: NONE, group: "scripting", since: "2.6.0", complexity: "O(N) with N being the length in bytes of the script body.", summary: "Loads a server-side Lua script to the script cache.", handler: script::load, acl: [SCRIPTING] },
];

static POLICY_SUBCOMMANDS: [CommandSpec; 4] = [
    cmd! { name: "get", arity: 3, flags: [LOADING | STALE], keys: NONE, group: "limiter", since: "0.2.0", complexity: "O(1)", summary: "Describes a policy in force: its limit, source, since when, and its stats.", handler: policy::get, acl: [RATELIMIT] },
    cmd! { name: "key", arity: -5, flags: [LOADING | STALE], keys: NONE, group: "limiter", since: "0.2.0", complexity: "O(N) where N is the number of descriptor entries", summary: "Returns the counter key a descriptor's policy uses.", handler: policy::key, acl: [RATELIMIT] },
    cmd! { name: "list", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "limiter", since: "0.2.0", complexity: "O(N) where N is the number of policies", summary: "Lists the policies in force.", handler: policy::list, acl: [RATELIMIT] },
    cmd! { name: "reload", arity: 2, flags: [ADMIN | NOSCRIPT | NO_MULTI], keys: NONE, group: "limiter", since: "0.2.0", complexity: "O(N) where N is the size of the policy files", summary: "Reads the policy files again; a bad file changes nothing.", handler: policy::reload, acl: [RATELIMIT] },
];

/// Every command, in alphabetical order.
static PUBSUB_SUBCOMMANDS: [CommandSpec; 4] = [
    cmd! { name: "channels", arity: -2, flags: [PUBSUB | LOADING | STALE], keys: NONE, group: "pubsub", since: "2.8.0", complexity: "O(N) where N is the number of active channels, and assuming constant time pattern matching (relatively short channels and patterns)", summary: "Returns the active channels.", handler: pubsub::channels },
    cmd! { name: "help", arity: 2, flags: [LOADING | STALE], keys: NONE, group: "pubsub", since: "6.2.0", complexity: "O(1)", summary: "Returns helpful text about the different subcommands.", handler: pubsub::help },
    cmd! { name: "numpat", arity: 2, flags: [PUBSUB | LOADING | STALE], keys: NONE, group: "pubsub", since: "2.8.0", complexity: "O(1)", summary: "Returns a count of unique pattern subscriptions.", handler: pubsub::numpat },
    cmd! { name: "numsub", arity: -2, flags: [PUBSUB | LOADING | STALE], keys: NONE, group: "pubsub", since: "2.8.0", complexity: "O(N) for the NUMSUB subcommand, where N is the number of requested channels", summary: "Returns a count of subscribers to channels.", handler: pubsub::numsub },
];

pub static COMMANDS: &[CommandSpec] = &[
    cmd! { name: "acl", arity: -2, flags: [], keys: NONE, group: "server", since: "6.0.0", complexity: "Depends on subcommand.", summary: "A container for Access List Control commands.", handler: container_without_subcommand, subcommands: &ACL_SUBCOMMANDS },
    cmd! { name: "asking", arity: 1, flags: [FAST], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Signals that a cluster client is following an -ASK redirect.", handler: cluster::accept, acl: [CONNECTION] },
    cmd! { name: "auth", arity: -2, flags: [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY], keys: NONE, group: "connection", since: "1.0.0", complexity: "O(N) where N is the number of passwords defined for the user", summary: "Authenticates the connection.", handler: connection::auth, acl: [CONNECTION] },
    cmd! { name: "bgrewriteaof", arity: 1, flags: [ADMIN | NOSCRIPT], keys: NONE, group: "server", since: "1.0.0", complexity: "O(1)", summary: "Asynchronously rewrites the append-only file to disk.", handler: aof::bgrewriteaof },
    cmd! { name: "bgsave", arity: -1, flags: [ADMIN | NOSCRIPT], keys: NONE, group: "server", since: "1.0.0", complexity: "O(1)", summary: "Asynchronously saves the database(s) to disk.", handler: snapshot::bgsave },
    cmd! { name: "cl.throttle", arity: -5, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "limiter", since: "0.1.0", complexity: "O(1)", summary: "Admits or denies a request as redis-cell's GCRA does.", handler: throttle::throttle, acl: [RATELIMIT] },
    cmd! { name: "client", arity: -2, flags: [], keys: NONE, group: "connection", since: "2.4.0", complexity: "Depends on subcommand.", summary: "A container for client connection commands.", handler: container_without_subcommand, subcommands: &CLIENT_SUBCOMMANDS },
    cmd! { name: "cluster", arity: -2, flags: [], keys: NONE, group: "cluster", since: "3.0.0", complexity: "Depends on subcommand.", summary: "A container for Redis Cluster commands.", handler: container_without_subcommand, subcommands: &CLUSTER_SUBCOMMANDS },
    cmd! { name: "command", arity: -1, flags: [LOADING | STALE], keys: NONE, group: "server", since: "2.8.13", complexity: "O(N) where N is the total number of Redis commands", summary: "Returns detailed information about all commands.", handler: command::all, subcommands: &COMMAND_SUBCOMMANDS, acl: [CONNECTION] },
    cmd! { name: "config", arity: -2, flags: [], keys: NONE, group: "server", since: "2.0.0", complexity: "Depends on subcommand.", summary: "A container for server configuration commands.", handler: container_without_subcommand, subcommands: &CONFIG_SUBCOMMANDS },
    cmd! { name: "dbsize", arity: 1, flags: [READONLY | FAST | ALL_KEYS], keys: NONE, group: "server", since: "1.0.0", complexity: "O(1)", summary: "Returns the number of keys in the database.", handler: server::dbsize, acl: [KEYSPACE] },
    cmd! { name: "debug", arity: -2, flags: [ADMIN | NOSCRIPT | LOADING | STALE], keys: NONE, group: "server", since: "1.0.0", complexity: "Depends on subcommand.", summary: "A container for debugging commands.", handler: dump::debug },
    cmd! { name: "decr", arity: 2, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "string", since: "1.0.0", complexity: "O(1)", summary: "Decrements the integer value of a key by one.", handler: string::decr, acl: [STRING] },
    cmd! { name: "decrby", arity: 3, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "string", since: "1.0.0", complexity: "O(1)", summary: "Decrements a number from the integer value of a key.", handler: string::decrby, acl: [STRING] },
    cmd! { name: "del", arity: -2, flags: [WRITE | KEYS_WRITE_ONLY], keys: ALL, group: "generic", since: "1.0.0", complexity: "O(N) where N is the number of keys that will be removed", summary: "Deletes one or more keys.", handler: keys::del, acl: [KEYSPACE] },
    cmd! { name: "discard", arity: 1, flags: [NOSCRIPT | LOADING | STALE | FAST | NOT_QUEUED | ALLOW_BUSY], keys: NONE, group: "transactions", since: "2.0.0", complexity: "O(N), when N is the number of queued commands", summary: "Discards a transaction.", handler: multi::discard, acl: [TRANSACTION] },
    cmd! { name: "dump", arity: 2, flags: [READONLY], keys: FIRST, group: "generic", since: "2.6.0", complexity: "O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis objects composing the value and M their average size.", summary: "Returns a serialized representation of the value stored at a key.", handler: dump::dump, acl: [KEYSPACE] },
    cmd! { name: "echo", arity: 2, flags: [FAST], keys: NONE, group: "connection", since: "1.0.0", complexity: "O(1)", summary: "Returns the given string.", handler: connection::echo, acl: [CONNECTION] },
    CommandSpec {
        key_finder: Some(script::eval_keys),
        ..cmd! { name: "eval", arity: -3, flags: [NOSCRIPT | STALE | MOVABLEKEYS | ALL_KEYS], keys: NONE, group: "scripting", since: "2.6.0", complexity: "Depends on the script that is executed.", summary: "Executes a server-side Lua script.", handler: script::eval, acl: [SCRIPTING] }
    },
    CommandSpec {
        key_finder: Some(script::eval_keys),
        ..cmd! { name: "eval_ro", arity: -3, flags: [READONLY | NOSCRIPT | STALE | MOVABLEKEYS | ALL_KEYS], keys: NONE, group: "scripting", since: "7.0.0", complexity: "Depends on the script that is executed.", summary: "Executes a read-only server-side Lua script.", handler: script::eval_ro, acl: [SCRIPTING] }
    },
    CommandSpec {
        key_finder: Some(script::eval_keys),
        ..cmd! { name: "evalsha", arity: -3, flags: [NOSCRIPT | STALE | MOVABLEKEYS | ALL_KEYS], keys: NONE, group: "scripting", since: "2.6.0", complexity: "Depends on the script that is executed.", summary: "Executes a server-side Lua script by SHA1 digest.", handler: script::evalsha, acl: [SCRIPTING] }
    },
    CommandSpec {
        key_finder: Some(script::eval_keys),
        ..cmd! { name: "evalsha_ro", arity: -3, flags: [READONLY | NOSCRIPT | STALE | MOVABLEKEYS | ALL_KEYS], keys: NONE, group: "scripting", since: "7.0.0", complexity: "Depends on the script that is executed.", summary: "Executes a read-only server-side Lua script by SHA1 digest.", handler: script::evalsha_ro, acl: [SCRIPTING] }
    },
    cmd! { name: "exec", arity: 1, flags: [NOSCRIPT | LOADING | STALE | NOT_QUEUED], keys: NONE, group: "transactions", since: "1.2.0", complexity: "Depends on commands in the transaction", summary: "Executes all commands in a transaction.", handler: multi::exec, acl: [TRANSACTION] },
    cmd! { name: "exists", arity: -2, flags: [READONLY | FAST | KEYS_UNREAD], keys: ALL, group: "generic", since: "1.0.0", complexity: "O(N) where N is the number of keys to check", summary: "Determines whether one or more keys exist.", handler: keys::exists, acl: [KEYSPACE] },
    cmd! { name: "expire", arity: -3, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "generic", since: "1.0.0", complexity: "O(1)", summary: "Sets the expiration time of a key in seconds.", handler: keys::expire, acl: [KEYSPACE] },
    cmd! { name: "expireat", arity: -3, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "generic", since: "1.2.0", complexity: "O(1)", summary: "Sets the expiration time of a key to a Unix timestamp.", handler: keys::expireat, acl: [KEYSPACE] },
    cmd! { name: "expiretime", arity: 2, flags: [READONLY | FAST], keys: FIRST, group: "generic", since: "7.0.0", complexity: "O(1)", summary: "Returns the expiration time of a key as a Unix timestamp.", handler: keys::expiretime, acl: [KEYSPACE] },
    cmd! { name: "flushall", arity: -1, flags: [WRITE | DANGEROUS | ALL_KEYS], keys: NONE, group: "server", since: "1.0.0", complexity: "O(N) where N is the total number of keys in all databases", summary: "Removes all keys from all databases.", handler: server::flushall, acl: [KEYSPACE] },
    cmd! { name: "flushdb", arity: -1, flags: [WRITE | DANGEROUS | ALL_KEYS], keys: NONE, group: "server", since: "1.0.0", complexity: "O(N) where N is the number of keys in the selected database", summary: "Remove all keys from the current database.", handler: server::flushall, acl: [KEYSPACE] },
    cmd! { name: "get", arity: 2, flags: [READONLY | FAST], keys: FIRST, group: "string", since: "1.0.0", complexity: "O(1)", summary: "Returns the string value of a key.", handler: string::get, acl: [STRING] },
    cmd! { name: "getdel", arity: 2, flags: [WRITE | FAST], keys: FIRST, group: "string", since: "6.2.0", complexity: "O(1)", summary: "Returns the string value of a key after deleting the key.", handler: string::getdel, acl: [STRING] },
    cmd! { name: "getex", arity: -2, flags: [WRITE | FAST], keys: FIRST, group: "string", since: "6.2.0", complexity: "O(1)", summary: "Returns the string value of a key after setting its expiration time.", handler: string::getex, acl: [STRING] },
    cmd! { name: "hdel", arity: -3, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(N) where N is the number of fields to be removed.", summary: "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.", handler: hash::hdel, acl: [HASH] },
    cmd! { name: "hello", arity: -1, flags: [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY], keys: NONE, group: "connection", since: "6.0.0", complexity: "O(1)", summary: "Handshakes with the Redis server.", handler: connection::hello, acl: [CONNECTION] },
    cmd! { name: "hexists", arity: 3, flags: [READONLY | FAST | KEYS_UNREAD], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(1)", summary: "Determines whether a field exists in a hash.", handler: hash::hexists, acl: [HASH] },
    cmd! { name: "hget", arity: 3, flags: [READONLY | FAST], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(1)", summary: "Returns the value of a field in a hash.", handler: hash::hget, acl: [HASH] },
    cmd! { name: "hgetall", arity: 2, flags: [READONLY], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(N) where N is the size of the hash.", summary: "Returns all fields and values in a hash.", handler: hash::hgetall, acl: [HASH] },
    cmd! { name: "hincrby", arity: 4, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(1)", summary: "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.", handler: hash::hincrby, acl: [HASH] },
    cmd! { name: "hincrbyfloat", arity: 4, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "hash", since: "2.6.0", complexity: "O(1)", summary: "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.", handler: hash::hincrbyfloat, acl: [HASH] },
    cmd! { name: "hkeys", arity: 2, flags: [READONLY], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(N) where N is the size of the hash.", summary: "Returns all fields in a hash.", handler: hash::hkeys, acl: [HASH] },
    cmd! { name: "hlen", arity: 2, flags: [READONLY | FAST | KEYS_UNREAD], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(1)", summary: "Returns the number of fields in a hash.", handler: hash::hlen, acl: [HASH] },
    cmd! { name: "hmget", arity: -3, flags: [READONLY | FAST], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(N) where N is the number of fields being requested.", summary: "Returns the values of all fields in a hash.", handler: hash::hmget, acl: [HASH] },
    cmd! { name: "hmset", arity: -4, flags: [WRITE | DENYOOM | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(N) where N is the number of fields being set.", summary: "Sets the values of multiple fields.", handler: hash::hmset, acl: [HASH] },
    cmd! { name: "hset", arity: -4, flags: [WRITE | DENYOOM | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with multiple field/value pairs.", summary: "Creates or modifies the value of a field in a hash.", handler: hash::hset, acl: [HASH] },
    cmd! { name: "hsetnx", arity: 4, flags: [WRITE | DENYOOM | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(1)", summary: "Sets the value of a field in a hash only when the field doesn't exist.", handler: hash::hsetnx, acl: [HASH] },
    cmd! { name: "hstrlen", arity: 3, flags: [READONLY | FAST | KEYS_UNREAD], keys: FIRST, group: "hash", since: "3.2.0", complexity: "O(1)", summary: "Returns the length of the value of a field.", handler: hash::hstrlen, acl: [HASH] },
    cmd! { name: "hvals", arity: 2, flags: [READONLY], keys: FIRST, group: "hash", since: "2.0.0", complexity: "O(N) where N is the size of the hash.", summary: "Returns all values in a hash.", handler: hash::hvals, acl: [HASH] },
    cmd! { name: "incr", arity: 2, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "string", since: "1.0.0", complexity: "O(1)", summary: "Increments the integer value of a key by one.", handler: string::incr, acl: [STRING] },
    cmd! { name: "incrby", arity: 3, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "string", since: "1.0.0", complexity: "O(1)", summary: "Increments the integer value of a key by a number.", handler: string::incrby, acl: [STRING] },
    cmd! { name: "incrbyfloat", arity: 3, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "string", since: "2.6.0", complexity: "O(1)", summary: "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", handler: string::incrbyfloat, acl: [STRING] },
    cmd! { name: "info", arity: -1, flags: [LOADING | STALE | ALL_KEYS], keys: NONE, group: "server", since: "1.0.0", complexity: "O(1)", summary: "Returns information and statistics about the server.", handler: server::info, acl: [DANGEROUS] },
    cmd! { name: "keys", arity: 2, flags: [READONLY | ALL_KEYS], keys: NONE, group: "generic", since: "1.0.0", complexity: "O(N) with N being the number of keys in the database", summary: "Returns all key names that match a pattern.", handler: keys::keys, acl: [DANGEROUS | KEYSPACE] },
    cmd! { name: "lastsave", arity: 1, flags: [LOADING | STALE | FAST], keys: NONE, group: "server", since: "1.0.0", complexity: "O(1)", summary: "Returns the Unix timestamp of the last successful save to disk.", handler: snapshot::lastsave, acl: [ADMIN | DANGEROUS] },
    cmd! { name: "lindex", arity: 3, flags: [READONLY], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(N) where N is the number of elements to traverse to get to the element at index.", summary: "Returns an element from a list by its index.", handler: list::lindex, acl: [LIST] },
    cmd! { name: "llen", arity: 2, flags: [READONLY | FAST | KEYS_UNREAD], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(1)", summary: "Returns the length of a list.", handler: list::llen, acl: [LIST] },
    cmd! { name: "lpop", arity: -2, flags: [WRITE | FAST], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(N) where N is the number of elements returned", summary: "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.", handler: list::lpop, acl: [LIST] },
    cmd! { name: "lpush", arity: -3, flags: [WRITE | DENYOOM | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.", summary: "Prepends one or more elements to a list. Creates the key if it doesn't exist.", handler: list::lpush, acl: [LIST] },
    cmd! { name: "lrange", arity: 4, flags: [READONLY], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(S+N) where S is the distance of start offset from HEAD for small lists, from nearest end (HEAD or TAIL) for large lists; and N is the number of elements in the specified range.", summary: "Returns a range of elements from a list.", handler: list::lrange, acl: [LIST] },
    cmd! { name: "lrem", arity: 4, flags: [WRITE | KEYS_WRITE_ONLY], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(N+M) where N is the length of the list and M is the number of elements removed.", summary: "Removes elements from a list. Deletes the list if the last element was removed.", handler: list::lrem, acl: [LIST] },
    cmd! { name: "ltrim", arity: 4, flags: [WRITE | KEYS_WRITE_ONLY], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(N) where N is the number of elements to be removed by the operation.", summary: "Removes elements from both ends a list. Deletes the list if all elements were trimmed.", handler: list::ltrim, acl: [LIST] },
    cmd! { name: "mget", arity: -2, flags: [READONLY | FAST], keys: ALL, group: "string", since: "1.0.0", complexity: "O(N) where N is the number of keys to retrieve.", summary: "Atomically returns the string values of one or more keys.", handler: string::mget, acl: [STRING] },
    CommandSpec {
        key_finder: Some(dump::migrate_keys),
        ..cmd! { name: "migrate", arity: -6, flags: [WRITE | MOVABLEKEYS], keys: NONE, group: "generic", since: "2.6.0", complexity: "This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two instances is performed.", summary: "Atomically transfers a key from one Redis instance to another.", handler: dump::migrate, acl: [DANGEROUS | KEYSPACE] }
    },
    cmd! { name: "mset", arity: -3, flags: [WRITE | DENYOOM | KEYS_WRITE_ONLY], keys: PAIRS, group: "string", since: "1.0.1", complexity: "O(N) where N is the number of keys to set.", summary: "Atomically creates or modifies the string values of one or more keys.", handler: string::mset, acl: [STRING] },
    cmd! { name: "multi", arity: 1, flags: [NOSCRIPT | LOADING | STALE | FAST | NOT_QUEUED | ALLOW_BUSY], keys: NONE, group: "transactions", since: "1.2.0", complexity: "O(1)", summary: "Starts a transaction.", handler: multi::multi, acl: [TRANSACTION] },
    cmd! { name: "persist", arity: 2, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "generic", since: "2.2.0", complexity: "O(1)", summary: "Removes the expiration time of a key.", handler: keys::persist, acl: [KEYSPACE] },
    cmd! { name: "pexpire", arity: -3, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "generic", since: "2.6.0", complexity: "O(1)", summary: "Sets the expiration time of a key in milliseconds.", handler: keys::pexpire, acl: [KEYSPACE] },
    cmd! { name: "pexpireat", arity: -3, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "generic", since: "2.6.0", complexity: "O(1)", summary: "Sets the expiration time of a key to a Unix milliseconds timestamp.", handler: keys::pexpireat, acl: [KEYSPACE] },
    cmd! { name: "pexpiretime", arity: 2, flags: [READONLY | FAST], keys: FIRST, group: "generic", since: "7.0.0", complexity: "O(1)", summary: "Returns the expiration time of a key as a Unix milliseconds timestamp.", handler: keys::pexpiretime, acl: [KEYSPACE] },
    cmd! { name: "ping", arity: -1, flags: [FAST], keys: NONE, group: "connection", since: "1.0.0", complexity: "O(1)", summary: "Returns the server's liveliness response.", handler: connection::ping, acl: [CONNECTION] },
    cmd! { name: "psetex", arity: 4, flags: [WRITE | DENYOOM | KEYS_WRITE_ONLY], keys: FIRST, group: "string", since: "2.6.0", complexity: "O(1)", summary: "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", handler: string::psetex, acl: [STRING] },
    cmd! { name: "psubscribe", arity: -2, flags: [PUBSUB | NOSCRIPT | LOADING | STALE], keys: NONE, group: "pubsub", since: "2.0.0", complexity: "O(N) where N is the number of patterns to subscribe to.", summary: "Listens for messages published to channels that match one or more patterns.", handler: pubsub::psubscribe },
    cmd! { name: "psync", arity: -3, flags: [ADMIN | NOSCRIPT | NO_MULTI], keys: NONE, group: "server", since: "2.8.0", complexity: "", summary: "An internal command used in replication.", handler: replication::psync },
    cmd! { name: "pttl", arity: 2, flags: [READONLY | FAST], keys: FIRST, group: "generic", since: "2.6.0", complexity: "O(1)", summary: "Returns the expiration time in milliseconds of a key.", handler: keys::pttl, acl: [KEYSPACE] },
    cmd! { name: "publish", arity: 3, flags: [PUBSUB | LOADING | STALE | FAST], keys: NONE, group: "pubsub", since: "2.0.0", complexity: "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).", summary: "Posts a message to a channel.", handler: pubsub::publish },
    cmd! { name: "pubsub", arity: -2, flags: [], keys: NONE, group: "pubsub", since: "2.8.0", complexity: "Depends on subcommand.", summary: "A container for Pub/Sub commands.", handler: container_without_subcommand, subcommands: &PUBSUB_SUBCOMMANDS },
    cmd! { name: "punsubscribe", arity: -1, flags: [PUBSUB | NOSCRIPT | LOADING | STALE], keys: NONE, group: "pubsub", since: "2.0.0", complexity: "O(N) where N is the number of patterns to unsubscribe.", summary: "Stops listening to messages published to channels that match one or more patterns.", handler: pubsub::punsubscribe },
    cmd! { name: "quit", arity: -1, flags: [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | NOT_QUEUED | ALLOW_BUSY], keys: NONE, group: "connection", since: "1.0.0", complexity: "O(1)", summary: "Closes the connection.", handler: connection::quit, acl: [CONNECTION] },
    cmd! { name: "readonly", arity: 1, flags: [LOADING | STALE | FAST], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Enables read-only queries for a connection to a Redis Cluster replica node.", handler: cluster::accept, acl: [CONNECTION] },
    cmd! { name: "readwrite", arity: 1, flags: [LOADING | STALE | FAST], keys: NONE, group: "cluster", since: "3.0.0", complexity: "O(1)", summary: "Enables read-write queries for a connection to a Redis Cluster replica node.", handler: cluster::accept, acl: [CONNECTION] },
    cmd! { name: "rename", arity: 3, flags: [WRITE], keys: FIRST_TWO, group: "generic", since: "1.0.0", complexity: "O(1)", summary: "Renames a key and overwrites the destination.", handler: keys::rename, acl: [KEYSPACE] },
    cmd! { name: "renamenx", arity: 3, flags: [WRITE | FAST], keys: FIRST_TWO, group: "generic", since: "1.0.0", complexity: "O(1)", summary: "Renames a key only when the target key name doesn't exist.", handler: keys::renamenx, acl: [KEYSPACE] },
    cmd! { name: "replconf", arity: -1, flags: [ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY], keys: NONE, group: "server", since: "3.0.0", complexity: "O(1)", summary: "An internal command for configuring the replication stream.", handler: replication::replconf },
    cmd! { name: "replicaof", arity: 3, flags: [ADMIN | NOSCRIPT | STALE], keys: NONE, group: "server", since: "5.0.0", complexity: "O(1)", summary: "Configures a server as replica of another, or promotes it to a master.", handler: replication::replicaof },
    cmd! { name: "reset", arity: 1, flags: [NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | NOT_QUEUED | ALLOW_BUSY], keys: NONE, group: "connection", since: "6.2.0", complexity: "O(1)", summary: "Resets the connection.", handler: connection::reset, acl: [CONNECTION] },
    cmd! { name: "restore", arity: -4, flags: [WRITE | DENYOOM | KEYS_WRITE_ONLY], keys: FIRST, group: "generic", since: "2.6.0", complexity: "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size.", summary: "Creates a key from the serialized representation of a value.", handler: dump::restore, acl: [DANGEROUS | KEYSPACE] },
    cmd! { name: "restore-asking", arity: -4, flags: [WRITE | DENYOOM | ASKING | KEYS_WRITE_ONLY], keys: FIRST, group: "server", since: "3.0.0", complexity: "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size.", summary: "An internal command for migrating keys in a cluster.", handler: dump::restore, acl: [DANGEROUS | KEYSPACE] },
    cmd! { name: "rl.acquire", arity: -4, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "limiter", since: "0.2.0", complexity: "O(N) where N is the number of live leases on the key", summary: "Takes a lease on units of a concurrency limit, if they fit.", handler: lease::acquire, acl: [RATELIMIT] },
    cmd! { name: "rl.allow", arity: -4, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "limiter", since: "0.1.0", complexity: "O(1); ALGO log: O(slots expired)", summary: "Admits or denies a request against a limit, atomically.", handler: allow::allow, acl: [RATELIMIT] },
    CommandSpec {
        key_finder: Some(parse::many_keys),
        ..cmd! { name: "rl.allowmany", arity: -5, flags: [WRITE | DENYOOM | MOVABLEKEYS], keys: NONE, group: "limiter", since: "0.1.0", complexity: "O(N) where N is the number of limits", summary: "Admits a request only if every one of several limits admits it.", handler: allow::allowmany, acl: [RATELIMIT] }
    },
    cmd! { name: "rl.charge", arity: -5, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "limiter", since: "0.3.0", complexity: "O(1); ALGO log: O(slots expired)", summary: "Records units used whatever the key's state (it may overdraw).", handler: charge::charge, acl: [RATELIMIT] },
    cmd! { name: "rl.check", arity: -4, flags: [WRITE | DENYOOM | FAST | NOSCRIPT | NO_MULTI], keys: FIRST, group: "limiter", since: "0.2.0", complexity: "O(N) where N is the number of descriptor entries", summary: "Admits or denies a request under the most specific policy matching a descriptor (the key is the domain: counters live in its hash slot).", handler: policy::check, acl: [RATELIMIT] },
    cmd! { name: "rl.leases", arity: -2, flags: [READONLY], keys: FIRST, group: "limiter", since: "0.2.0", complexity: "O(log N + C) where N is the number of live leases on the key and C the leases listed (COUNT, 1000 by default)", summary: "Lists a concurrency limit's live leases, a page at a time.", handler: lease::leases, acl: [RATELIMIT] },
    cmd! { name: "rl.peek", arity: -4, flags: [READONLY | FAST], keys: FIRST, group: "limiter", since: "0.1.0", complexity: "O(1); ALGO log: O(slots expired)", summary: "Returns what RL.ALLOW would answer, consuming nothing.", handler: allow::peek, acl: [RATELIMIT] },
    cmd! { name: "rl.policy", arity: -2, flags: [], keys: NONE, group: "limiter", since: "0.2.0", complexity: "Depends on subcommand.", summary: "A container for policy commands.", handler: container_without_subcommand, subcommands: &POLICY_SUBCOMMANDS, acl: [RATELIMIT] },
    cmd! { name: "rl.refund", arity: 3, flags: [WRITE | FAST], keys: FIRST, group: "limiter", since: "0.1.0", complexity: "O(1); ALGO log: O(slots refunded)", summary: "Gives back units charged earlier.", handler: allow::refund, acl: [RATELIMIT] },
    cmd! { name: "rl.release", arity: 3, flags: [WRITE | FAST], keys: FIRST, group: "limiter", since: "0.2.0", complexity: "O(N) where N is the number of live leases on the key", summary: "Ends a lease, freeing its units.", handler: lease::release, acl: [RATELIMIT] },
    cmd! { name: "rl.renew", arity: 4, flags: [WRITE | FAST], keys: FIRST, group: "limiter", since: "0.2.0", complexity: "O(N) where N is the number of live leases on the key", summary: "Extends a live lease.", handler: lease::renew, acl: [RATELIMIT] },
    cmd! { name: "rl.reset", arity: -2, flags: [WRITE | KEYS_WRITE_ONLY], keys: ALL, group: "limiter", since: "0.1.0", complexity: "O(N) where N is the number of keys", summary: "Forgets the limiter state of keys.", handler: allow::reset, acl: [RATELIMIT | DANGEROUS] },
    cmd! { name: "rl.state", arity: 2, flags: [READONLY | FAST], keys: FIRST, group: "limiter", since: "0.1.0", complexity: "O(1)", summary: "Describes a limiter key's state.", handler: allow::state, acl: [RATELIMIT] },
    cmd! { name: "rl.top", arity: -1, flags: [READONLY | LOADING | STALE], keys: NONE, group: "limiter", since: "0.2.0", complexity: "O(S log S) where S is the number of keys the sketches track (--top-keys)", summary: "Returns the keys with the most denials, admissions or shadow denials on this node, heaviest first.", handler: top::top, acl: [RATELIMIT | DANGEROUS] },
    cmd! { name: "role", arity: 1, flags: [NOSCRIPT | LOADING | STALE | FAST], keys: NONE, group: "server", since: "2.8.12", complexity: "O(1)", summary: "Returns the replication role.", handler: replication::role, acl: [ADMIN | DANGEROUS] },
    cmd! { name: "rpop", arity: -2, flags: [WRITE | FAST], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(N) where N is the number of elements returned", summary: "Returns and removes the last elements of a list. Deletes the list if the last element was popped.", handler: list::rpop, acl: [LIST] },
    cmd! { name: "rpush", arity: -3, flags: [WRITE | DENYOOM | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "list", since: "1.0.0", complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.", summary: "Appends one or more elements to a list. Creates the key if it doesn't exist.", handler: list::rpush, acl: [LIST] },
    cmd! { name: "save", arity: 1, flags: [ADMIN | NOSCRIPT | NO_MULTI], keys: NONE, group: "server", since: "1.0.0", complexity: "O(N) where N is the total number of keys in all databases", summary: "Synchronously saves the database(s) to disk.", handler: snapshot::save },
    cmd! { name: "scan", arity: -2, flags: [READONLY | ALL_KEYS], keys: NONE, group: "generic", since: "2.8.0", complexity: "O(1) for every call. O(N) for a complete iteration.", summary: "Iterates over the key names in the database.", handler: keys::scan, acl: [KEYSPACE] },
    cmd! { name: "script", arity: -2, flags: [], keys: NONE, group: "scripting", since: "2.6.0", complexity: "Depends on subcommand.", summary: "A container for Lua scripts management commands.", handler: container_without_subcommand, subcommands: &SCRIPT_SUBCOMMANDS },
    cmd! { name: "select", arity: 2, flags: [LOADING | STALE | FAST], keys: NONE, group: "connection", since: "1.0.0", complexity: "O(1)", summary: "Changes the selected database.", handler: connection::select, acl: [CONNECTION] },
    cmd! { name: "set", arity: -3, flags: [WRITE | DENYOOM], keys: FIRST, group: "string", since: "1.0.0", complexity: "O(1)", summary: "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", handler: string::set, acl: [STRING] },
    cmd! { name: "setex", arity: 4, flags: [WRITE | DENYOOM | KEYS_WRITE_ONLY], keys: FIRST, group: "string", since: "2.0.0", complexity: "O(1)", summary: "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.", handler: string::setex, acl: [STRING] },
    cmd! { name: "setnx", arity: 3, flags: [WRITE | DENYOOM | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "string", since: "1.0.0", complexity: "O(1)", summary: "Set the string value of a key only when the key doesn't exist.", handler: string::setnx, acl: [STRING] },
    cmd! { name: "shutdown", arity: -1, flags: [ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | ALLOW_BUSY], keys: NONE, group: "server", since: "1.0.0", complexity: "O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)", summary: "Synchronously saves the database(s) to disk and shuts down the Redis server.", handler: shutdown::shutdown },
    cmd! { name: "slaveof", arity: 3, flags: [ADMIN | NOSCRIPT | STALE], keys: NONE, group: "server", since: "1.0.0", complexity: "O(1)", summary: "Sets a Redis server as a replica of another, or promotes it to being a master.", handler: replication::replicaof },
    cmd! { name: "subscribe", arity: -2, flags: [PUBSUB | NOSCRIPT | LOADING | STALE], keys: NONE, group: "pubsub", since: "2.0.0", complexity: "O(N) where N is the number of channels to subscribe to.", summary: "Listens for messages published to channels.", handler: pubsub::subscribe },
    cmd! { name: "time", arity: 1, flags: [LOADING | STALE | FAST], keys: NONE, group: "server", since: "2.6.0", complexity: "O(1)", summary: "Returns the server time.", handler: server::time },
    cmd! { name: "ttl", arity: 2, flags: [READONLY | FAST], keys: FIRST, group: "generic", since: "1.0.0", complexity: "O(1)", summary: "Returns the expiration time in seconds of a key.", handler: keys::ttl, acl: [KEYSPACE] },
    cmd! { name: "type", arity: 2, flags: [READONLY | FAST | KEYS_UNREAD], keys: FIRST, group: "generic", since: "1.0.0", complexity: "O(1)", summary: "Determines the type of value stored at a key.", handler: keys::type_, acl: [KEYSPACE] },
    cmd! { name: "unlink", arity: -2, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: ALL, group: "generic", since: "4.0.0", complexity: "O(1) for each key removed regardless of its size.", summary: "Asynchronously deletes one or more keys.", handler: keys::del, acl: [KEYSPACE] },
    cmd! { name: "unsubscribe", arity: -1, flags: [PUBSUB | NOSCRIPT | LOADING | STALE], keys: NONE, group: "pubsub", since: "2.0.0", complexity: "O(N) where N is the number of channels to unsubscribe.", summary: "Stops listening to messages posted to channels.", handler: pubsub::unsubscribe },
    cmd! { name: "unwatch", arity: 1, flags: [NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY], keys: NONE, group: "transactions", since: "2.2.0", complexity: "O(1)", summary: "Forgets about watched keys of a transaction.", handler: multi::unwatch, acl: [TRANSACTION] },
    cmd! { name: "wait", arity: 3, flags: [NOSCRIPT], keys: NONE, group: "generic", since: "3.0.0", complexity: "O(1)", summary: "Blocks until the asynchronous replication of all preceding write commands sent by the connection are completed.", handler: replication::wait, acl: [CONNECTION] },
    cmd! { name: "watch", arity: -2, flags: [NOSCRIPT | LOADING | STALE | FAST | NOT_QUEUED | ALLOW_BUSY | KEYS_UNREAD], keys: ALL, group: "transactions", since: "2.2.0", complexity: "O(1) for every key.", summary: "Monitors changes to keys to determine the execution of a transaction.", handler: multi::watch, acl: [TRANSACTION] },
    cmd! { name: "zadd", arity: -4, flags: [WRITE | DENYOOM | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "sorted-set", since: "1.2.0", complexity: "O(log(N)) for each item added, where N is the number of elements in the sorted set.", summary: "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.", handler: zset::zadd, acl: [SORTEDSET] },
    cmd! { name: "zcard", arity: 2, flags: [READONLY | FAST | KEYS_UNREAD], keys: FIRST, group: "sorted-set", since: "1.2.0", complexity: "O(1)", summary: "Returns the number of members in a sorted set.", handler: zset::zcard, acl: [SORTEDSET] },
    cmd! { name: "zcount", arity: 4, flags: [READONLY | FAST], keys: FIRST, group: "sorted-set", since: "2.0.0", complexity: "O(log(N)) with N being the number of elements in the sorted set.", summary: "Returns the count of members in a sorted set that have scores within a range.", handler: zset::zcount, acl: [SORTEDSET] },
    cmd! { name: "zincrby", arity: 4, flags: [WRITE | DENYOOM | FAST], keys: FIRST, group: "sorted-set", since: "1.2.0", complexity: "O(log(N)) where N is the number of elements in the sorted set.", summary: "Increments the score of a member in a sorted set.", handler: zset::zincrby, acl: [SORTEDSET] },
    cmd! { name: "zrange", arity: -4, flags: [READONLY], keys: FIRST, group: "sorted-set", since: "1.2.0", complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.", summary: "Returns members in a sorted set within a range of indexes.", handler: zset::zrange, acl: [SORTEDSET] },
    cmd! { name: "zrangebyscore", arity: -4, flags: [READONLY], keys: FIRST, group: "sorted-set", since: "1.0.5", complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).", summary: "Returns members in a sorted set within a range of scores.", handler: zset::zrangebyscore, acl: [SORTEDSET] },
    cmd! { name: "zrem", arity: -3, flags: [WRITE | FAST | KEYS_WRITE_ONLY], keys: FIRST, group: "sorted-set", since: "1.2.0", complexity: "O(M*log(N)) with N being the number of elements in the sorted set and M the number of elements to be removed.", summary: "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.", handler: zset::zrem, acl: [SORTEDSET] },
    cmd! { name: "zremrangebyrank", arity: 4, flags: [WRITE | KEYS_WRITE_ONLY], keys: FIRST, group: "sorted-set", since: "2.0.0", complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.", summary: "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.", handler: zset::zremrangebyrank, acl: [SORTEDSET] },
    cmd! { name: "zremrangebyscore", arity: 4, flags: [WRITE | KEYS_WRITE_ONLY], keys: FIRST, group: "sorted-set", since: "1.2.0", complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.", summary: "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.", handler: zset::zremrangebyscore, acl: [SORTEDSET] },
    cmd! { name: "zscore", arity: 3, flags: [READONLY | FAST], keys: FIRST, group: "sorted-set", since: "1.2.0", complexity: "O(1)", summary: "Returns the score of a member in a sorted set.", handler: zset::zscore, acl: [SORTEDSET] },
];

/// The registry over [`COMMANDS`]: what handlers reach through
/// [`Ctx::registry`], and the server hands each connection.
pub static REGISTRY: LazyLock<Registry> = LazyLock::new(|| Registry::new(COMMANDS));

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
            assert!(c.name.len() <= crate::cmd::registry::spec::MAX_NAME);
            assert!(c.arity != 0);
        }
    }

    #[test]
    fn the_sessions_seen_bitmap_covers_the_table() {
        assert!(COMMANDS.len() <= crate::cmd::exec::session::SEEN_BITS);
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(REGISTRY.lookup(b"GeT").unwrap().name, "get");
        assert!(REGISTRY.lookup(b"nope").is_none());
        assert!(REGISTRY.lookup(&[b'a'; 100]).is_none());
        for cmd in COMMANDS {
            let upper = cmd.name.to_ascii_uppercase();
            let found = REGISTRY.lookup(upper.as_bytes()).map(|c| c.name);
            assert_eq!(found, Some(cmd.name));
            // A name one byte longer is another name.
            let mut other = cmd.name.as_bytes().to_vec();
            other.push(b'_');
            assert!(REGISTRY.lookup(&other).is_none(), "{}_", cmd.name);
        }
        assert!(REGISTRY.lookup(b"GET\0").is_none());
        assert!(REGISTRY.lookup(b"").is_none());
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
