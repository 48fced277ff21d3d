//! Commands that run the server rather than reach keys: connection,
//! client, config, server, command, cluster, replication, snapshot, `SHUTDOWN`,
//! the append-only file and Pub/Sub.

pub mod acl;
pub mod aof;
pub mod client;
pub mod cluster;
pub mod cluster_live;
pub mod command;
pub mod config;
pub mod connection;
pub mod pubsub;
pub mod replication;
pub mod server;
pub mod shutdown;
pub mod snapshot;

use super::{args, error, CmdError, CommandSpec, Ctx, Flags};
