//! What a command is and which exist: the spec, the context a handler
//! runs with and the registry it finds other commands in (`spec.rs`), the
//! table of every command (`table.rs`), `--rename-command` (`rename.rs`),
//! argument reading (`args.rs`), the error type (`error.rs`) and the
//! `HELP` replies (`help.rs`).

pub mod args;
pub mod error;
pub mod help;
pub mod rename;
pub mod spec;
pub mod table;
