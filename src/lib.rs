//! Turnstile: an in-memory rate-limiter server that speaks the Redis
//! protocol.
//!
//! # Layout
//!
//! - `main.rs`: parse the config, start logging, run the server until a
//!   signal.
//! - [`config`]: every setting declared once, one row each in the
//!   `rows!` list of `config/rows.rs` (name, aliases, flags, default,
//!   parser, help, its start-up field and live cell, apply step), from
//!   which come `Config` and the live cells (`config/fields.rs`), the rows
//!   as `SETTINGS` (`config/table.rs`, which says what a row is), the
//!   flags, `TURNSTILE_*` environment variables, the optional TOML file
//!   (`config/mod.rs`) and `CONFIG GET/SET/REWRITE`; the values settings
//!   take and their parsers (`config/values.rs`, `config/kind.rs`); the
//!   settings in force and their readers (`config/live.rs`, with the
//!   cells that are more than an atomic in `config/cells.rs`).
//! - [`server`]: the listener and accept loop (`server/mod.rs`), one
//!   client's socket loop (`server/connection.rs`: read, run the batch,
//!   write under the output limit), the metrics HTTP endpoint and
//!   `POST /json` (`server/http.rs`), the ACL user a request there or to
//!   the rate limit service logs in as (`server/auth.rs`), the status page on it
//!   (`server/status.rs`, `status.html`), Envoy's rate limit service over
//!   gRPC with the health service (`server/rls.rs`: messages in and out,
//!   the decision is `policy/rls.rs`'s), the snapshot thread
//!   (`server/snapshots.rs`), `--tls-port`'s rustls config and handshake
//!   and `--tls-replication`'s client config (`server/tls.rs`),
//!   replication's feeders and link (`server/replication.rs`), Sentinel's
//!   failovers in cluster mode (`server/sentinel.rs`).
//! - [`protocol`]: the hardened request decoder (`decode.rs`, `inline.rs`),
//!   the look-ahead at a batch's keys for prefetching (`peek.rs`), the
//!   request view (`request.rs`), and the RESP2/RESP3 reply encoder
//!   (`reply.rs`).
//! - [`cmd`]: the commands, split by job. `cmd/registry/`: what a
//!   command is, the context its handler runs with and the registry it
//!   finds others in (`spec.rs`), the table of every command, one
//!   named-field entry each with arity, flags, key positions and handler
//!   (`table.rs`, the only file that names every family; handlers reach it
//!   through `Ctx::registry`, never by import), `--rename-command`,
//!   argument reading, errors, `HELP` replies. `cmd/exec/`: one
//!   connection's run of commands: the decode-and-execute loop (`batch.rs`,
//!   the server's and the fuzzing harness's), the checks before a command
//!   runs or is queued (`dispatch.rs`), its run, counters and the
//!   `--maxmemory` check (`run.rs`), the connection's state (`session.rs`),
//!   transactions (`tx.rs` the queue and watched keys, `multi.rs` the
//!   commands, over the shards they lock). `cmd/script/`: `EVAL`, `EVALSHA`,
//!   `SCRIPT` and the host the Lua engine calls back into;
//!   `cmd/script/native/` runs the limiter libraries' Lua scripts it
//!   recognises by SHA1 in Rust, one file per library over the calls they
//!   share (`ops.rs`). `cmd/data/`: strings, keys, lists, hashes, sorted
//!   sets, and moving keys between servers (`dump.rs`: `DUMP`, `RESTORE`,
//!   `MIGRATE`). `cmd/limit/`: `RL.ALLOW` and the rest (`allow.rs`), leases,
//!   `CL.THROTTLE`, their arguments (`parse.rs`), the reply every decision
//!   shares (`reply.rs`), the policy commands (`policy.rs`). `cmd/admin/`:
//!   connection, client, config, server, command, cluster, replication,
//!   snapshot, `SHUTDOWN` (`shutdown.rs`) and Pub/Sub commands.
//! - [`store`]: the sharded keyspace (`store/mod.rs`), with its views:
//!   the `Keyspace` every command reaches it through (the store, or the
//!   shards a transaction holds), a `MultiLock` of shards locked
//!   together, a transaction's `HeldShards`, a command's or script's
//!   `Locked` (its own lock or the transaction's), each keeping only its
//!   locking, watch marks and lending; the per-key verbs they share
//!   (`get`, `update`, `remove`...) written once, the `Keys` trait over
//!   how a view reaches a key's shard (`store/keys.rs`); `WATCH`'s write
//!   counters (a shard's in `store/watch.rs`); one shard, a hash index of handles over record
//!   arenas (`store/shard.rs`, `store/index.rs`, `store/arena.rs`; a log's
//!   and a lease key's state in a typed arena beside its record;
//!   `RL.ALLOW` decided where its compact record lies,
//!   `store/shard/in_place.rs`); the packed limiter records, each
//!   constant-size state's compact form (each algorithm's `Storage`), and their interned parameters
//!   (`store/record.rs`, `store/params.rs`); the
//!   lists, sorted sets and hashes scripts use (`store/collections.rs`); what
//!   a key holds as commands see it (`store/entry.rs`); limiter state in
//!   the keyspace, applied through the `Limiter` contract with the TTL it
//!   implies (`store/limit.rs`); all-or-nothing decisions over several
//!   limits, one executor (`store/plan.rs`: lock every key, peek, `BLOCK`
//!   the deniers or check `--maxmemory`'s room and charge them all) that
//!   `RL.ALLOWMANY`, the policy commands and Envoy's service run, each
//!   key it looks at and writes hashed, found and decoded once
//!   (`store/known.rs`, the `HeldKeys` verbs of the views that hold
//!   their shards between a look and a write); inline short byte
//!   strings (`store/bytes.rs`); the expiry sweeper (`store/sweeper.rs`);
//!   one key's record as the snapshot file, the replication stream and the
//!   append-only file carry it (`store/codec.rs`); the snapshot file around
//!   the records (`store/snapshot.rs`); `DUMP`'s payload around one record
//!   (`store/dump.rs`); Redis Cluster's key slots, by which the store
//!   shards keys in cluster mode (`store/slot.rs`); `--maxmemory`'s eviction
//!   (`store/evict.rs`); the replication stream of effects (every frame
//!   kind listed once there),
//!   each write's resulting state logged under its shard's lock into the
//!   backlog ring (`store/effects.rs`).
//! - [`limiter`]: the algorithms, one file each (`window.rs`,
//!   `sliding.rs`, `log/`, whose ring's storage is `log/slots.rs` and
//!   whose borrowed view is safe outside it, `gcra.rs`, `fixed.rs`;
//!   `calendar.rs` the calendar periods `fixed` can follow), one line
//!   each in the list every per-algorithm fact is expanded from
//!   (`limiter/algorithms.rs`, which imports nothing): pure functions
//!   over (state, params, now, cost) behind one contract, the `Limiter`
//!   trait and beside it `Storage` (a state's record tag, its fields in
//!   files, its compact form), with the types they speak in
//!   (`limiter/contract.rs`, which the algorithm files import and which
//!   makes `Algorithm` from the list; `limiter/mod.rs` makes the
//!   dispatch from it and validates a limit against them, `LimitSpec`); redis-cell's
//!   `CL.THROTTLE` arithmetic over GCRA (`cell.rs`); concurrency limits,
//!   leases acquired, released, renewed and lapsing (`lease.rs`, pure too,
//!   with its own operations: `cmd/limit/lease.rs` serves them).
//! - [`script`]: the Lua engine behind `EVAL`: the pool of Lua states and
//!   the script cache (`script/mod.rs`), what the engine and its callers
//!   share (`api.rs`: settings, a compiled script, errors, the `Host`,
//!   the running script's kill state), one state's setup, compilation
//!   and run (`vm.rs`), the state's own heap and its cap (`heap.rs`), Lua 5.1 sandboxed as Redis 7.0 sandboxes it
//!   (`prelude.lua`), `redis.call` and replies into Lua on the raw Lua API
//!   (`call.rs`, which owns the context a call reaches), Lua values into replies (`convert.rs`), and the
//!   libraries Redis loads, one file each under `libs/` (`bit.rs`,
//!   `pack.rs` for `struct`, `cjson.rs`, `msgpack.rs`, over their shared argument helpers in `args.rs`); `redis.call` reaches the
//!   command table through the `Host` the command layer
//!   provides (`cmd/script/mod.rs`: EVAL, EVALSHA, SCRIPT, and the shard locks
//!   that make a script atomic).
//! - [`acl`]: Redis 7's ACL users (`acl/mod.rs`: the users in force,
//!   each in a cell open connections read per command; the categories;
//!   the ids rules name commands by, which the command table builds),
//!   one user's rules and selectors, parsed, printed back and checked (`acl/user.rs`);
//!   `cmd/admin/acl.rs` serves `ACL`, and `cmd/exec/dispatch.rs` checks
//!   each command against its connection's user.
//! - [`state`]: what every command can reach: store, clock, live settings,
//!   counters, clients, snapshots, and the stop a `SHUTDOWN` asks for
//!   (which the server's handle waits on: `cmd` never sees `server`).
//! - [`policy`]: named limits from files in envoyproxy/ratelimit's format:
//!   one file read and checked (`policy/file.rs`), the match tree, counter
//!   keys, stats and the atomically swapped set in force (`policy/mod.rs`),
//!   reloading on file changes (`policy/watch.rs`); `cmd/limit/policy.rs` serves
//!   `RL.CHECK`, `RL.ALLOW ... POLICY` and `RL.POLICY` from it, and
//!   `policy/rls.rs` decides Envoy's rate limit service requests (a domain's
//!   descriptors, all-or-nothing) for `server/rls.rs` and `POST /json`,
//!   over what they hand it (`rls::Env`); a policy's limit as a step of a
//!   plan and what its decision counts (`policy/step.rs`).
//! - [`pubsub`]: channels, patterns and each subscriber's mailbox of
//!   messages, which its connection writes between batches; `cmd/admin/pubsub.rs`
//!   serves `SUBSCRIBE`, `PUBLISH`, `PUBSUB` and the rest.
//! - [`replication`]: who this server follows and who follows it (role,
//!   history IDs, attached replicas, PSYNC's partial-or-full choice, the
//!   stream read and applied on a replica, the full copy replicas share
//!   (`replication/copy.rs`), a replica's limits); `cmd/admin/replication.rs` serves `REPLICAOF`,
//!   `PSYNC`, `REPLCONF`, `WAIT`, `ROLE` and `INFO replication`, and
//!   `server/replication.rs` runs the sockets: a feeder per replica, the
//!   link to the primary, the once-a-second chores; `server/sentinel.rs`
//!   follows Sentinel's failovers in cluster mode (`--cluster-sentinels`).
//! - [`clients`]: the registry of connected clients (`CLIENT LIST/KILL`,
//!   `INFO clients`); [`persist`]: what `SAVE`, `BGSAVE`, `INFO` and the
//!   snapshot thread share (settings, one writer, the last outcomes), and
//!   the append-only file (`persist/aof/`: the effects stream after a
//!   snapshot-format base, its loading, rewrite and group-commit fsync;
//!   the checksummed blocks after the base and their replay, `format.rs`;
//!   its writer thread is `server/aof.rs`, `BGREWRITEAOF` `cmd/admin/aof.rs`).
//! - [`stats`]: the counters behind `INFO` and `/metrics` tallied per
//!   connection and flushed once per batch (commands, errors, decisions),
//!   the atomics of the counters' table's own rows (`Counters`), and the
//!   heavy hitters' sketches behind `RL.TOP` (`stats/top.rs`); [`metrics`]:
//!   every counter and gauge declared once, one row each (`table.rs`, over
//!   the row's types in `counters.rs`), and the loops that render `INFO`,
//!   the Prometheus exposition (`/metrics`) and `/status.json` from it
//!   (`mod.rs`).
//! - [`cluster`]: Redis Cluster's key slots (`cluster/slot.rs`, from the
//!   store's `store/slot.rs`); the growing cluster of `--cluster-enabled`:
//!   a node's view of every node, its epochs, slots and open slots, pure
//!   and driven by messages and a clock (`cluster/state.rs`, with
//!   `state/gossip.rs` for messages and the clock, `state/conf.rs` for
//!   `CLUSTER NODES` and `nodes.conf`), the bus's messages and framing
//!   (`cluster/bus.rs`), the lock-free routing table requests read
//!   (`cluster/routing.rs`), and the node that ties them together and
//!   writes the file (`cluster/node.rs`); `server/cluster_bus.rs` runs the
//!   bus's sockets and `cmd/admin/cluster_live.rs` its commands and
//!   routing. And the older static topology `--cluster-nodes` or
//!   `--cluster-config` describes: shards, their replicas, and which
//!   member is each shard's primary now (`cluster/topology.rs`).
//! - [`clock`]: server time as `Nanos`; the system clock that never steps
//!   back, and a manual clock for tests.
//! - [`harness`]: the server without sockets (bytes in, replies out, on a
//!   manual clock), for fuzzing and network-free tests.
//! - [`logging`]: the log subscriber, text or JSON lines (`--log-format`).
//! - [`glob`], [`util`], [`alloc`]: Redis-style glob matching, integer
//!   parsing and the x87 `long double` of `INCRBYFLOAT`
//!   (`util/long_double.rs`), the connections `MIGRATE` keeps
//!   (`util/sockets.rs`), the counting allocator behind `INFO memory`.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod acl;
pub mod alloc;
pub mod clients;
pub mod clock;
pub mod cluster;
pub mod cmd;
pub mod config;
pub mod glob;
pub mod harness;
pub mod limiter;
pub mod logging;
pub mod metrics;
pub mod persist;
pub mod policy;
pub mod protocol;
pub mod pubsub;
pub mod replication;
pub mod script;
pub mod server;
pub mod state;
pub mod stats;
pub mod store;
pub mod util;

pub use clock::{Clock, ManualClock, Nanos, SystemClock};
pub use config::Config;
pub use protocol::REDIS_VERSION;
pub use server::{start, ServerHandle, ShutdownError, StartError};
