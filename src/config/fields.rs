//! The server's settings as it starts (`Config`) and the cells `CONFIG
//! SET` changes (`Live`), one field each, made from the heads of the rows
//! in `config/rows.rs`.

use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};

use super::cells::{LiveOutputLimits, Secret};
use super::rows::rows;
use super::values::{MaxmemoryPolicy, OutputLimits};

/// Makes `Config` (with `Config::blank`, every field at its type's
/// default, which the parsed values then fill) and `Live` from the rows'
/// heads; the rows themselves are `SETTINGS`' (`config/table.rs`).
macro_rules! fields {
    ($({ $($f:ident: $t:ty $(; live $c:ident: $ct:ty)?)? } $row:expr),* $(,)?) => {
        /// The server's settings as it starts: one field for each setting
        /// with one (its row says what it means), in its type.
        #[derive(Debug, Clone)]
        pub struct Config { $($(pub $f: $t,)?)* }

        impl Config {
            pub(super) fn blank() -> Config {
                Config { $($($f: Default::default(),)?)* }
            }
        }

        /// Settings readable on every request and changeable by `CONFIG
        /// SET`: one cell each, which `Settings::new` fills from the
        /// start-up value.
        #[derive(Default)]
        pub struct Live { $($($(pub $c: $ct,)?)?)* }
    };
}
rows!(fields);
