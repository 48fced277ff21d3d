//! Turnstile's integration tests, one binary: each module tests one job
//! of the server through its real interfaces (a server started in-process
//! on port 0 and real clients over TCP, the binary for what a newcomer
//! meets, the files it writes). One binary links tonic, mlua and rustls
//! once, not once per file. `maxmemory.rs`, `status_page.rs` and
//! `fairness.rs` stay binaries of their own: the first two set
//! `--maxmemory`, which in tests measures the process's RSS (every test's
//! heap, in a shared process), the third tunes the sockets it finds among
//! the process's descriptors; none may share a process with other tests.
//!
//! Run one module: `cargo test --test it limiter_commands::`.

#[path = "../common/mod.rs"]
mod common;

mod acl;
mod acl_config;
mod acl_links;
mod acl_selectors;
mod aof;
mod architecture;
mod cluster;
mod cluster_live;
mod config_rewrite;
mod data_types;
mod decoder;
mod dockerfile;
mod docs_tables;
mod first_hour;
mod lease_props;
mod leases;
mod limiter_commands;
mod limiter_props;
mod metrics;
mod migrate;
mod native_scripts;
mod output_limit;
mod policies;
mod policy_commands;
mod protected_mode;
mod pubsub;
mod quotas;
mod rename_command;
mod replication;
mod reply_encoding;
mod rls;
mod roundtrip_props;
mod script_conversions;
mod script_shutdown;
mod scripting;
mod server_commands;
mod server_connection;
mod server_protocol;
mod shutdown;
mod snapshot;
mod store_model;
mod string_commands;
mod tls;
mod top;
mod transactions;
