//! Turnstile: an in-memory rate-limiter server that speaks the Redis
//! protocol.
//!
//! # Layout
//!
//! - `main.rs`: parse the config, start logging, run the server until a
//!   signal.
//! - [`config`]: flags, `TURNSTILE_*` environment variables, the optional
//!   TOML file, defaults.
//! - [`server`]: the listener and accept loop (`server/mod.rs`), one
//!   client's socket loop (`server/connection.rs`: read, run the batch,
//!   write under the output limit), the metrics HTTP endpoint and
//!   `POST /json` (`server/http.rs`), Envoy's rate limit service over
//!   gRPC with the health service (`server/rls.rs`: messages in and out,
//!   the decision is `cmd/rls.rs`'s), the snapshot thread
//!   (`server/snapshots.rs`), `--tls-port`'s rustls config and handshake
//!   and `--tls-replication`'s client config (`server/tls.rs`),
//!   replication's feeders and link (`server/replication.rs`), Sentinel's
//!   failovers in cluster mode (`server/sentinel.rs`).
//! - [`protocol`]: the hardened request decoder (`decode.rs`, `inline.rs`),
//!   the look-ahead at a batch's keys for prefetching (`peek.rs`), the
//!   request view (`request.rs`), and the RESP2/RESP3 reply encoder
//!   (`reply.rs`).
//! - [`cmd`]: the command table (`cmd/table.rs`: name, arity, flags, key
//!   positions, handler, one named-field entry per command; the types in
//!   `cmd/spec.rs`), argument reading (`cmd/args.rs`) and one file per
//!   command family (`list.rs`, `zset.rs`, `hash.rs` over the shared
//!   collection access of `collection.rs`; `script.rs` for EVAL and
//!   SCRIPT); a handler parses
//!   its arguments, reaches keys through the context's `Keyspace`, writes
//!   its reply. `cmd/session.rs` is one connection's state (auth, the
//!   transaction, tallies); `cmd/batch.rs` its decode-and-execute loop
//!   (the server's and the fuzzing harness's); `cmd/mod.rs` checks and runs
//!   each request (or queues it in `MULTI`); `cmd/multi.rs` runs
//!   transactions over the shards they lock; `cmd/limiter/` parses the
//!   limiter commands and shapes their replies; `cmd/native/` runs the
//!   limiter libraries' Lua scripts it recognises by SHA1 in Rust, one
//!   file per library, with the Lua path's replies and effects.
//! - [`store`]: the sharded keyspace (`store/mod.rs`), with the
//!   `Keyspace` view every command reaches it through (the store, or the
//!   shards a transaction holds) and `WATCH`'s write counters; one shard, a
//!   hash index of handles over record arenas (`store/shard.rs`,
//!   `store/index.rs`, `store/arena.rs`); the packed limiter records and
//!   their interned parameters (`store/record.rs`, `store/params.rs`); the
//!   lists, sorted sets and hashes scripts use (`store/collections.rs`); what
//!   a key holds as commands see it (`store/entry.rs`); limiter state in
//!   the keyspace, applied through the `Limiter` contract with the TTL it
//!   implies (`store/limit.rs`); inline short byte
//!   strings (`store/bytes.rs`); the expiry sweeper (`store/sweeper.rs`);
//!   snapshots (`store/snapshot.rs`); the replication stream of effects,
//!   each write's resulting state logged under its shard's lock into the
//!   backlog ring (`store/effects.rs`).
//! - [`limiter`]: the algorithms, one file each (`window.rs`, `log.rs`,
//!   `gcra.rs`, `fixed.rs`): pure functions over (state, params, now, cost)
//!   behind one contract, the `Limiter` trait (`limiter/mod.rs`); redis-cell's
//!   `CL.THROTTLE` arithmetic over GCRA (`cell.rs`); concurrency limits,
//!   leases acquired, released, renewed and lapsing (`lease.rs`, pure too,
//!   with its own operations: `cmd/limiter/lease.rs` serves them).
//! - [`script`]: the Lua engine behind `EVAL`: the pool of Lua states and
//!   the script cache (`script/mod.rs`), one state's setup, compilation
//!   and run (`vm.rs`), Lua 5.1 sandboxed as Redis 7.0 sandboxes it
//!   (`prelude.lua`), `redis.call` and replies into Lua on the raw Lua API
//!   (`call.rs`), Lua values into replies (`convert.rs`), and the
//!   libraries Redis loads, one file each under `libs/` (`bit.rs`,
//!   `pack.rs` for `struct`, `cjson.rs`, `msgpack.rs`); `redis.call` reaches the
//!   command table through the `Host` the command layer
//!   provides (`cmd/script.rs`: EVAL, EVALSHA, SCRIPT, and the shard locks
//!   that make a script atomic).
//! - [`state`]: what every command can reach: store, clock, live settings,
//!   counters, clients, snapshots.
//! - [`policy`]: named limits from files in envoyproxy/ratelimit's format:
//!   one file read and checked (`policy/file.rs`), the match tree, counter
//!   keys, stats and the atomically swapped set in force (`policy/mod.rs`),
//!   reloading on file changes (`policy/watch.rs`); `cmd/policy.rs` serves
//!   `RL.CHECK`, `RL.ALLOW ... POLICY` and `RL.POLICY` from it, and
//!   `cmd/rls.rs` decides Envoy's rate limit service requests (a domain's
//!   descriptors, all-or-nothing) for `server/rls.rs` and `POST /json`.
//! - [`pubsub`]: channels, patterns and each subscriber's mailbox of
//!   messages, which its connection writes between batches; `cmd/pubsub.rs`
//!   serves `SUBSCRIBE`, `PUBLISH`, `PUBSUB` and the rest.
//! - [`replication`]: who this server follows and who follows it (role,
//!   history IDs, attached replicas, PSYNC's partial-or-full choice, the
//!   stream read and applied on a replica, the full copy replicas share
//!   (`replication/copy.rs`), a replica's limits); `cmd/replication.rs` serves `REPLICAOF`,
//!   `PSYNC`, `REPLCONF`, `WAIT`, `ROLE` and `INFO replication`, and
//!   `server/replication.rs` runs the sockets: a feeder per replica, the
//!   link to the primary, the once-a-second chores; `server/sentinel.rs`
//!   follows Sentinel's failovers in cluster mode (`--cluster-sentinels`).
//! - [`clients`]: the registry of connected clients (`CLIENT LIST/KILL`,
//!   `INFO clients`); [`persist`]: what `SAVE`, `BGSAVE`, `INFO` and the
//!   snapshot thread share (settings, one writer, the last outcomes).
//! - [`stats`]: the counters behind `INFO` and `/metrics`, tallied per
//!   connection and flushed once per batch; [`metrics`]: the Prometheus
//!   exporter and its HTTP endpoint (`/metrics`, `/healthz`).
//! - [`cluster`]: Redis Cluster's key slots (`cluster/slot.rs`) and the
//!   topology `--cluster-nodes` or `--cluster-config` describes: shards,
//!   their replicas, and which member is each shard's primary now
//!   (`cluster/topology.rs`).
//! - [`clock`]: server time as `Nanos`; the system clock that never steps
//!   back, and a manual clock for tests.
//! - [`harness`]: the server without sockets (bytes in, replies out, on a
//!   manual clock), for fuzzing and network-free tests.
//! - [`logging`]: the log subscriber, text or JSON lines (`--log-format`).
//! - [`glob`], [`util`], [`alloc`]: Redis-style glob matching, integer
//!   parsing and the x87 `long double` of `INCRBYFLOAT`
//!   (`util/long_double.rs`), the counting allocator behind `INFO memory`.

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
pub use server::{start, ServerHandle, ShutdownError, StartError};

/// The Redis version reported to clients (`INFO`, `HELLO`): the Redis 7
/// command set and replies this server follows. Clients gate features on it.
pub const REDIS_VERSION: &str = "7.2.0";
