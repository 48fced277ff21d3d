//! Every setting, declared once: its name and aliases, where it may be
//! set (flag, `TURNSTILE_*` variable, `--config` key, `CONFIG SET`), its
//! default, how its value is read and checked, where the value is kept,
//! its `--help` text and heading, and what a `CONFIG SET` of it sets in
//! motion. The command line (`super::command`), the config file,
//! `CONFIG GET/SET/REWRITE` (`cmd/admin/config.rs`), `Settings::new` and
//! the docs' check (`tests/it/docs_tables.rs`) all read `SETTINGS` (`config/rows.rs`), as
//! Redis's `config.c` reads its `configs[]` rows. The rows are
//! `config/rows.rs`; this is what a row is.

use clap::builder::{TypedValueParser, ValueParser};

use super::fields::Config;
use super::kind::{text, Cell, Kind, Line, Val, Value};
use super::live::Settings;
use super::rows::rows;
use super::values::{MaxmemoryPolicy, Number, OutputLimits};
use crate::persist::aof::Fsync;

/// `CONFIG GET` shows it.
pub const CONFIG: u16 = 1;
/// `CONFIG SET` changes it (it has a `live` cell); `CONFIG REWRITE`
/// writes it back.
pub const MODIFIABLE: u16 = 1 << 1 | CONFIG;
/// `CONFIG GET` shows what the running server reports (the port it bound,
/// the primary it follows), not the value it started with: the command
/// layer answers for it (`cmd/admin/config.rs`, `fact`).
pub const FACT: u16 = 1 << 2 | CONFIG;
/// A `CONFIG` parameter only, with no flag, variable or file key
/// (redis.conf names clients read: `databases`, `save`).
pub const NOT_A_FLAG: u16 = 1 << 3;
/// No `TURNSTILE_*` variable (`rename-command` reads its own, by hand).
pub const NO_ENV: u16 = 1 << 4;
/// `--help` does not show the variable's value (a password).
pub const SECRET: u16 = 1 << 5;
/// `--help` does not show the default (the help text says it).
pub const HIDE_DEFAULT: u16 = 1 << 6;
/// A comma-separated list, repeatable.
pub const LIST: u16 = 1 << 7;
/// Shown by `--help` only: `-h` keeps to the settings most people set
/// (a screen of them), leaving out announce addresses and the older
/// static cluster mode.
pub const LONG_HELP_ONLY: u16 = 1 << 8;
/// Repeatable, each use one whole value (no comma split: an ACL `user`
/// line may hold commas); a TOML array of strings in the file.
pub const REPEAT: u16 = 1 << 9;

/// `--help`'s headings, in the order they first appear in `SETTINGS` (`config/rows.rs`).
pub const SERVER: &str = "Server";
pub const SECURITY: &str = "Security";
pub const TLS: &str = "TLS";
pub const CLIENTS: &str = "Clients and memory";
pub const PERSISTENCE: &str = "Persistence";
pub const REPLICATION: &str = "Replication";
pub const CLUSTER: &str = "Cluster";
pub const POLICIES: &str = "Policies";
pub const SCRIPTS: &str = "Scripts";
pub const RLS: &str = "Envoy rate limit service";
pub const METRICS: &str = "Metrics and logs";

/// One setting.
pub struct Setting {
    /// The flag without `--`, the file's key, the `CONFIG` parameter.
    pub name: &'static str,
    /// Other `CONFIG` names for it (Redis 7's `busy-reply-threshold`).
    pub aliases: &'static [&'static str],
    /// [`CONFIG`], [`MODIFIABLE`], ... or'ed.
    pub flags: u16,
    /// `--help`'s heading.
    pub group: &'static str,
    /// The flag's value in `--help` (`N`, `SIZE`; `A B` for two).
    pub value_name: &'static str,
    /// As the flag's default value; `None`: unset.
    pub default: Option<&'static str>,
    /// Paragraphs split by a blank line: the first is `-h`'s line (one
    /// sentence, about 70 characters at most), the whole is `--help`'s.
    pub help: &'static str,
    /// How a value is read, checked and shown.
    pub kind: Kind,
    /// Where the value is kept from start-up: its [`Config`] field.
    pub field: Option<Field>,
    /// Where `CONFIG SET` keeps it: its [`Settings`] cell.
    pub live: Option<fn(&Settings) -> &dyn Cell>,
    /// Run after `CONFIG SET` changed it.
    pub apply: Option<fn(&dyn Services)>,
}

impl Setting {
    /// The fields most rows leave as they are.
    pub const ROW: Setting = Setting {
        name: "",
        aliases: &[],
        flags: 0,
        group: SERVER,
        value_name: "",
        default: None,
        help: "",
        kind: Kind::Other(super::kind::text),
        field: None,
        live: None,
        apply: None,
    };

    pub fn is(&self, flag: u16) -> bool {
        self.flags & flag == flag
    }

    /// Its value in `config`, `None` for a setting with no field.
    pub fn value(&self, config: &Config) -> Option<Val> {
        self.field.map(|f| (f.get)(config).val())
    }

    /// The value in force: the live cell's, else the start-up value.
    pub fn current(&self, settings: &Settings) -> Option<Val> {
        match self.live {
            Some(cell) => Some(cell(settings).load()),
            None => self.value(&settings.config),
        }
    }
}

/// What an apply step reaches: the live settings and the services config
/// cannot import (`State` provides them).
pub trait Services {
    fn settings(&self) -> &Settings;
    fn aof(&self) -> &crate::persist::aof::Aof;
    fn acl(&self) -> &crate::acl::Acl;
}

/// A [`Config`] field, read and written as a [`Val`].
#[derive(Clone, Copy)]
pub struct Field {
    pub get: fn(&Config) -> &dyn Value,
    pub set: fn(&mut Config) -> &mut dyn Value,
}

const I32: i64 = i32::MAX as i64;
const U32: i64 = u32::MAX as i64;
const MAX: i64 = i64::MAX;

// The command line's parsers for `Kind::Other`, each as the flag had it.
fn path() -> ValueParser {
    clap::builder::PathBufValueParser::new()
        .map(Val::Path)
        .into()
}
fn port() -> ValueParser {
    clap::value_parser!(u16).map(|n| Val::Num(n.into())).into()
}
fn count() -> ValueParser {
    ValueParser::new(|s: &str| {
        s.parse::<usize>()
            .map(|n| Val::Num(n as u64))
            .map_err(|e| e.to_string())
    })
}
fn count32() -> ValueParser {
    clap::value_parser!(u32).map(|n| Val::Num(n.into())).into()
}
fn top_sample() -> ValueParser {
    clap::value_parser!(u32)
        .range(1..=65_536)
        .map(|n| Val::Num(n.into()))
        .into()
}
fn top_keys() -> ValueParser {
    ValueParser::new(|s: &str| super::values::parse_top_keys(s).map(|n| Val::Num(n as u64)))
}
fn size() -> ValueParser {
    ValueParser::new(|s: &str| super::values::parse_memory(s).map(Val::Num))
}
fn duration() -> ValueParser {
    ValueParser::new(|s: &str| super::values::parse_duration(s).map(Val::Duration))
}
fn file_name() -> ValueParser {
    ValueParser::new(|s: &str| super::values::parse_file_name(s).map(Val::Text))
}
fn host_port() -> ValueParser {
    ValueParser::new(|s: &str| crate::util::parse_host_port(s).map(|(h, p)| Val::Addr(h, p)))
}
fn log_format() -> ValueParser {
    clap::builder::PossibleValuesParser::new(crate::logging::FORMATS)
        .map(Val::Text)
        .into()
}
fn maxmemory_policy(s: &str) -> Result<u8, String> {
    MaxmemoryPolicy::parse(s).map(MaxmemoryPolicy::index)
}
fn fsync(s: &str) -> Result<u8, String> {
    Fsync::parse(s).map(|f| f as u8)
}

/// A `CONFIG SET appendonly`: the file's thread starts or stops it now.
/// A `CONFIG SET requirepass`: the default user's password becomes it
/// (none: `nopass`), as Redis's `ACLUpdateDefaultUserPassword`.
fn follow_requirepass(s: &dyn Services) {
    s.acl()
        .set_default_password(s.settings().password().as_deref());
}

fn follow_appendonly(s: &dyn Services) {
    let on = s
        .settings()
        .appendonly
        .load(std::sync::atomic::Ordering::Relaxed);
    s.aof().follow(on);
}

/// A `CONFIG SET appendfsync`: the next reply already follows it.
fn follow_appendfsync(s: &dyn Services) {
    let i = s
        .settings()
        .appendfsync
        .load(std::sync::atomic::Ordering::Relaxed);
    s.aof().set_fsync(Fsync::from_index(i));
}

/// Makes `SETTINGS` from the rows: each row's `field` and `live` from its
/// head.
macro_rules! settings_table {
    ($({ $($f:ident: $t:ty $(; live $c:ident: $ct:ty)?)? } $row:expr),* $(,)?) => {
        /// Every setting, in `--help`'s order (`config/rows.rs`).
        pub static SETTINGS: &[Setting] = &[$(
            Setting {
                field: settings_table!(@field $($f)?),
                live: settings_table!(@live $($($c)?)?),
                ..$row
            },
        )*];
    };
    (@field) => { None };
    (@field $f:ident) => {
        Some(Field { get: |c| &c.$f, set: |c| &mut c.$f })
    };
    (@live) => { None };
    (@live $c:ident) => { Some(|s| &s.$c) };
}
rows!(settings_table);

#[cfg(test)]
mod tests {
    use super::*;

    /// Names and aliases are unique; a `CONFIG SET` setting has a cell to
    /// keep it, and a setting with a cell is settable; every flag has a
    /// field; the defaults other modules keep are the rows'.
    #[test]
    fn rows_are_consistent() {
        let mut names: Vec<&str> = SETTINGS
            .iter()
            .flat_map(|s| std::iter::once(&s.name).chain(s.aliases))
            .copied()
            .collect();
        names.sort_unstable();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        for s in SETTINGS {
            assert_eq!(s.is(MODIFIABLE), s.live.is_some(), "{}", s.name);
            assert_eq!(s.is(NOT_A_FLAG), s.field.is_none(), "{}", s.name);
        }
        let top = |n: &str| SETTINGS.iter().find(|s| s.name == n).unwrap().default;
        assert_eq!(
            top("top-keys"),
            Some(crate::stats::top::DEFAULT_KEYS.to_string().as_str())
        );
        assert_eq!(
            top("top-sample"),
            Some(crate::stats::top::DEFAULT_SAMPLE.to_string().as_str())
        );
    }
}
