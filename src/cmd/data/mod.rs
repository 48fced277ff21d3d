//! The data-type commands: strings, keys, lists, hashes and sorted sets
//! (`collection.rs` is the typed access lists, hashes and sorted sets
//! share).

pub mod collection;
pub mod dump;
pub mod hash;
pub mod keys;
pub mod list;
pub mod string;
pub mod zset;

use super::{args, error, CmdError, Ctx};
