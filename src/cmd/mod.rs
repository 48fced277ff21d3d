//! Commands, split by job:
//!
//! - `registry/`: what a command is and the table of them all (`spec.rs`:
//!   the spec, the handler's context, the registry handlers look commands
//!   up in; `table.rs`: one entry per command, the only file that names
//!   every family), `--rename-command`, argument reading, errors, help.
//! - `exec/`: one connection's run of commands: the decode-and-execute
//!   loop (`batch.rs`), the checks before a command runs (`dispatch.rs`),
//!   the connection's state (`session.rs`), transactions (`tx.rs`, the
//!   queue and the watched keys; `multi.rs`, the commands).
//! - `script/`: `EVAL`, `EVALSHA`, `SCRIPT` and the host the Lua engine
//!   calls back into; `script/native/`, the known limiter scripts run in
//!   Rust.
//! - `data/`: strings, keys, lists, hashes, sorted sets.
//! - `limit/`: the limiter commands (`RL.ALLOW`, leases, `CL.THROTTLE`),
//!   their arguments and reply, and the policy commands.
//! - `admin/`: connection, client, config, server, command, cluster,
//!   replication, snapshot and Pub/Sub commands.
//!
//! Handlers import the registry's types (`registry/spec.rs`), never the
//! table: they reach other commands through `Ctx::registry`, so the only
//! import circle a new command could close does not exist.

pub mod admin;
pub mod data;
pub mod exec;
pub mod limit;
pub mod registry;
pub mod script;

pub use registry::args;
pub use registry::error::{self, CmdError};
pub use registry::spec::{CommandSpec, Ctx, Flags, KeySpec, Registry};
