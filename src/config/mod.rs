//! Command-line flags, environment variables and the optional config file.
//!
//! Precedence: flag > `TURNSTILE_<FLAG>` environment variable > `--config`
//! TOML file > built-in default. clap, over the flags `config::table`'s
//! rows declare, resolves the first two and the default; a value clap
//! reports as "from the default" is then replaced by the file's, if the
//! file sets it.

use clap::parser::ValueSource;
use clap::{ArgMatches, FromArgMatches, Subcommand};
use std::path::{Path, PathBuf};

mod cells;
mod fields;
pub mod kind;
pub mod live;
mod rows;
pub mod table;
mod values;
pub use fields::Config;
pub use kind::{Kind, Val};
pub use live::Settings;
pub use table::Setting;
pub use table::SETTINGS;
pub use values::*;

/// The command line: a subcommand, or the server's settings.
#[derive(Debug, Clone)]
pub struct Cli {
    pub command: Option<Command>,
    pub config: Config,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Exit 0 if a server answers PING (for container health checks).
    Healthcheck {
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, env = "TURNSTILE_PORT", default_value_t = 6379)]
        port: u16,
    },
}

impl Setting {
    /// Its `TURNSTILE_*` variable.
    pub fn env(&self) -> Option<&'static str> {
        if self.flags & (table::NO_ENV | table::NOT_A_FLAG) != 0 {
            return None;
        }
        static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| {
            SETTINGS
                .iter()
                .map(|s| format!("TURNSTILE_{}", s.name.replace('-', "_").to_uppercase()))
                .collect()
        });
        let i = SETTINGS.iter().position(|s| std::ptr::eq(s, self))?;
        Some(names[i].as_str())
    }
}

impl Settings {
    /// The settings in force at start: each live cell from its row's
    /// start-up value.
    pub fn new(config: &Config, password: Option<Vec<u8>>) -> Self {
        let settings = Settings {
            live: fields::Live::default(),
            config: config.clone(),
        };
        for s in SETTINGS {
            if let (Some(cell), Some(v)) = (s.live, s.value(config)) {
                cell(&settings).store(v);
            }
        }
        settings.set_password(password.as_deref());
        settings
    }
}

impl Setting {
    /// Its command-line flag.
    fn arg(&'static self) -> clap::Arg {
        use table::{HIDE_DEFAULT, LIST, LONG_HELP_ONLY, REPEAT, SECRET};
        let (short, long) = match self.help.split_once("\n\n") {
            Some((first, _)) => (first, Some(self.help)),
            None => (self.help, None),
        };
        let mut arg = clap::Arg::new(self.name)
            .long(self.name)
            .help(short.strip_suffix('.').unwrap_or(short))
            .long_help(long)
            .help_heading(self.group)
            .value_parser(self.kind.parser())
            .hide_env_values(self.is(SECRET))
            .hide_default_value(self.is(HIDE_DEFAULT))
            .hide_short_help(self.is(LONG_HELP_ONLY))
            .hide_possible_values(true)
            .env(self.env())
            .default_value(self.default);
        arg = match self.value_name.split_once(' ') {
            Some((a, b)) => arg
                .value_names([a, b])
                .num_args(2)
                .action(clap::ArgAction::Append)
                .allow_hyphen_values(true),
            None => arg.value_name(self.value_name),
        };
        if self.is(LIST) {
            arg = arg.value_delimiter(',').action(clap::ArgAction::Append);
        }
        if self.is(REPEAT) {
            arg = arg.action(clap::ArgAction::Append);
        }
        arg
    }
}

impl clap::CommandFactory for Cli {
    /// The command line, every flag from its [`SETTINGS`] row.
    fn command() -> clap::Command {
        let command = clap::Command::new("turnstile")
            .version(env!("CARGO_PKG_VERSION"))
            .about("An in-memory rate-limiter server that speaks the Redis protocol")
            .after_help(
                "Each option also reads TURNSTILE_<OPTION> (TURNSTILE_REPL_TIMEOUT for \
                 --repl-timeout)\nand its key in the --config file. --help says more.",
            )
            // Never wrap nor move help to its own line: `-h` keeps one
            // line an option (clap is built without `wrap_help`, so
            // nothing wraps anyway).
            .term_width(0);
        let command = Command::augment_subcommands(command);
        SETTINGS
            .iter()
            .filter(|s| !s.is(table::NOT_A_FLAG))
            .fold(command, |c, s| c.arg(s.arg()))
    }

    fn command_for_update() -> clap::Command {
        Self::command()
    }
}

impl Cli {
    /// The settings `matches` holds, each put in its field.
    fn from_matches(matches: &ArgMatches) -> Result<Cli, clap::Error> {
        let mut config = Config::blank();
        for s in SETTINGS {
            let (Some(field), Ok(Some(values))) = (s.field, matches.try_get_many::<Val>(s.name))
            else {
                continue;
            };
            for v in values {
                (field.set)(&mut config).put(v.clone());
            }
        }
        let command = match matches.subcommand_name() {
            Some(_) => Some(Command::from_arg_matches(matches)?),
            None => None,
        };
        Ok(Cli { command, config })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("--requirepass-file: cannot read {path}: {source}")]
    PasswordFile {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A bad value that came from a `TURNSTILE_*` variable, not a flag:
    /// clap's message names only the flag.
    #[error("invalid value in the environment variable {var} (for {flag}): {message}")]
    Env {
        var: String,
        flag: String,
        message: String,
    },
    #[error("{0}")]
    Cli(#[from] clap::Error),
}

impl Default for Config {
    fn default() -> Self {
        Config::parse_from(["turnstile"]).expect("defaults are valid")
    }
}

impl Config {
    /// Settings for an in-process test server: loopback, a free port.
    pub fn for_tests() -> Self {
        Config {
            port: 0,
            metrics_addr: "127.0.0.1:0".into(),
            ..Config::default()
        }
    }

    /// Parses flags, environment and config file.
    pub fn parse_from<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = Cli::parse_full(args)?;
        Ok(cli.config)
    }

    /// Worker threads the runtime runs: `--threads`, or one per core but
    /// one (a 2-core host runs one worker, as measured best there, and a
    /// larger one still scales), at least one.
    pub fn worker_threads(&self) -> usize {
        match self.threads {
            0 => {
                std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
            }
            n => n,
        }
        .min(64)
    }

    /// Where the append-only file is: `--appendfilename` beside the
    /// snapshot, else in the working directory.
    pub fn aof_path(&self) -> PathBuf {
        match self.snapshot.as_deref().and_then(|p| p.parent()) {
            Some(dir) if !dir.as_os_str().is_empty() => dir.join(&self.appendfilename),
            _ => PathBuf::from(&self.appendfilename),
        }
    }

    /// Whether metrics are served (not `--metrics-addr off`).
    pub fn metrics_enabled(&self) -> bool {
        !self.metrics_addr.eq_ignore_ascii_case("off")
    }

    /// The cluster topology, if cluster mode is on; `port` is the port
    /// actually bound (the default announce address uses it).
    pub fn topology(
        &self,
        port: u16,
    ) -> Result<Option<crate::cluster::Topology>, crate::cluster::TopologyError> {
        use crate::cluster::Topology;
        let announce = self
            .cluster_announce
            .clone()
            .unwrap_or_else(|| format!("{}:{port}", self.bind));
        if let Some(path) = &self.cluster_config {
            return Topology::from_file(path, &announce).map(Some);
        }
        match &self.cluster_nodes {
            Some(list) => {
                let addrs: Vec<String> = list
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                Topology::even(&addrs, &announce).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The `--rename-command` pairs: from the flags, else from
    /// `TURNSTILE_RENAME_COMMAND` (`NAME=NEWNAME,...`), else the file.
    pub fn renames(&self) -> Vec<(String, String)> {
        if self.rename_command.is_empty() {
            if let Ok(env) = std::env::var("TURNSTILE_RENAME_COMMAND") {
                return env
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|pair| match pair.split_once('=') {
                        Some((a, b)) => (a.trim().to_string(), b.trim().to_string()),
                        None => (pair.trim().to_string(), String::new()),
                    })
                    .collect();
            }
        }
        self.rename_command
            .chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
            .collect()
    }

    /// The password in force: `--requirepass`, else `--requirepass-file`.
    pub fn password(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if let Some(p) = &self.requirepass {
            return Ok((!p.is_empty()).then(|| p.as_bytes().to_vec()));
        }
        let Some(path) = &self.requirepass_file else {
            return Ok(None);
        };
        let text = std::fs::read(path).map_err(|source| ConfigError::PasswordFile {
            path: path.clone(),
            source,
        })?;
        let trimmed = text.strip_suffix(b"\n").unwrap_or(&text);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        Ok((!trimmed.is_empty()).then(|| trimmed.to_vec()))
    }
}

impl Cli {
    /// The command line; for `-h`, without each option's `[env: ...]`,
    /// which would take `-h`'s one line an option past 120 characters
    /// (the after-help names the rule, and `--help` shows each). Only
    /// the help text differs: parsing is the same either way.
    fn command_for(args: &[std::ffi::OsString]) -> clap::Command {
        let command = <Cli as clap::CommandFactory>::command();
        if args.iter().skip(1).any(|a| a == "-h") {
            command.mut_args(|a| a.hide_env(true))
        } else {
            command
        }
    }

    /// Parses the command line (and environment, and config file).
    pub fn parse_full<I, T>(args: I) -> Result<Cli, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let matches = Cli::command_for(&args)
            .try_get_matches_from(args.clone())
            .map_err(|e| name_the_variable(e, &args))?;
        if let Some(Val::Path(path)) = matches.get_one::<Val>("config") {
            // The file's settings become arguments of the lowest rank:
            // only those neither a flag nor a variable gave are added, and
            // clap parses them as it parses flags.
            let from_file = file_arguments(&matches, path)?;
            args.splice(1..1, from_file);
        }
        let matches = <Cli as clap::CommandFactory>::command()
            .try_get_matches_from(args.clone())
            .map_err(|e| name_the_variable(e, &args))?;
        Ok(Cli::from_matches(&matches)?)
    }
}

/// The settings of a `--config` file as command-line arguments, for those
/// settings `matches` has only by default.
///
/// The file's keys are the flags' long names (kebab-case), the names of
/// the settings' rows: a file value is checked by the row's parser, the
/// flag's, here, so a wrong one is reported with the file's path and key.
/// Values are TOML strings, integers or booleans (`yes`/`no`);
/// `rename-command` is a table of `NAME = "NEWNAME"`.
fn file_arguments(
    matches: &ArgMatches,
    path: &Path,
) -> Result<Vec<std::ffi::OsString>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_owned(),
        message,
    };
    let table: toml::Table = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let command = <Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    for (key, value) in table {
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && a.get_id() != "config")
            .ok_or_else(|| invalid(unknown_setting(&command, &key)))?;
        let id = arg.get_id().as_str();
        if !matches!(
            matches.value_source(id),
            None | Some(ValueSource::DefaultValue)
        ) {
            continue;
        }
        let words: Vec<String> = match value {
            toml::Value::Table(pairs) if id == "rename-command" => pairs
                .into_iter()
                .map(|(name, new)| match new {
                    toml::Value::String(new) => Ok([name, new]),
                    other => Err(invalid(format!(
                        "rename-command: '{name}' must name a string, not {}",
                        other.type_str()
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .flatten()
                .collect(),
            // A repeatable setting (`user`): one use per string.
            toml::Value::Array(items)
                if SETTINGS.iter().any(|s| s.name == id && s.is(table::REPEAT)) =>
            {
                items
                    .into_iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Ok(s),
                        other => Err(invalid(format!(
                            "{key}: expected an array of strings, found {}",
                            other.type_str()
                        ))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            toml::Value::String(s) => vec![s],
            toml::Value::Integer(n) => vec![n.to_string()],
            toml::Value::Boolean(b) => vec![if b { "yes" } else { "no" }.to_string()],
            other => {
                return Err(invalid(format!(
                    "{key}: expected a string, a number or a boolean, not {}",
                    other.type_str()
                )))
            }
        };
        let per_use = arg.get_num_args().map_or(1, |n| n.min_values().max(1));
        for group in words.chunks(per_use) {
            let mut one = vec![std::ffi::OsString::from("turnstile")];
            match group {
                // `--key=value`: a value that starts with `-` (a password,
                // as `CONFIG REWRITE` writes it) is the flag's, not a flag.
                [value] => one.push(format!("--{key}={value}").into()),
                _ => {
                    one.push(format!("--{key}").into());
                    one.extend(group.iter().map(Into::into));
                }
            }
            // The flag alone, to check the value with its own parser.
            clap::Command::new("turnstile")
                .arg(arg.clone())
                .try_get_matches_from(&one)
                .map_err(|e| {
                    let msg = e.to_string();
                    let first = msg.lines().next().unwrap_or_default();
                    invalid(format!("{key}: {}", first.trim_start_matches("error: ")))
                })?;
            out.extend(one.into_iter().skip(1));
        }
    }
    Ok(out)
}

/// A config file's unknown key, with the setting it most likely means: the
/// flag's name when only `_` for `-` or the case differ (`protected_mode`
/// is `protected-mode`).
fn unknown_setting(command: &clap::Command, key: &str) -> String {
    let wanted = key.replace('_', "-").to_ascii_lowercase();
    match command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .find(|long| *long == wanted && *long != "config")
    {
        Some(long) => format!("unknown setting '{key}': did you mean '{long}'?"),
        None => format!("unknown setting '{key}' (settings are the flags' names, as `turnstile --help` lists them, without `--`)"),
    }
}

/// A value clap refused that came from a `TURNSTILE_*` variable (its flag
/// absent from the command line) is reported naming the variable; any
/// other error is clap's own.
fn name_the_variable(e: clap::Error, args: &[std::ffi::OsString]) -> ConfigError {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return e.into();
    }
    let Some(ContextValue::String(shown)) = e.get(ContextKind::InvalidArg) else {
        return e.into();
    };
    let long = shown
        .trim_start_matches("--")
        .split([' ', '='])
        .next()
        .unwrap_or_default()
        .to_string();
    let given = args.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")))
    });
    let command = <Cli as clap::CommandFactory>::command();
    let var = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long.as_str()))
        .and_then(|a| a.get_env())
        .and_then(|v| v.to_str())
        .map(str::to_string);
    match var {
        Some(var) if !given && std::env::var_os(&var).is_some() => {
            let message = e
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_string();
            ConfigError::Env {
                var,
                flag: format!("--{long}"),
                message,
            }
        }
        _ => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn defaults() {
        let c = Config::parse_from(["turnstile"]).unwrap();
        assert_eq!(c.bind, "127.0.0.1");
        assert_eq!(c.port, 6379);
        assert_eq!(c.maxclients, 10_000);
        assert_eq!(c.proto_max_bulk_len, 512 * 1024 * 1024);
        assert_eq!(c.client_query_buffer_limit, 1024 * 1024 * 1024);
    }

    /// `--repl-backlog-size 100gb` used to start, and abort the process
    /// at the first PSYNC; it is refused at start-up now, in the words
    /// `CONFIG SET` uses. `--repl-timeout` takes Redis's range.
    #[test]
    fn replication_settings_are_bounded_at_start_up() {
        let err = Config::parse_from(["turnstile", "--repl-backlog-size", "100gb"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("argument must be between 16384 and 1073741824 inclusive"),
            "{err}"
        );
        assert!(Config::parse_from(["turnstile", "--repl-backlog-size", "1kb"]).is_err());
        let c = Config::parse_from(["turnstile", "--repl-backlog-size", "1gb"]).unwrap();
        assert_eq!(c.repl_backlog_size, 1 << 30);
        assert_eq!(Config::default().repl_timeout, 60);
        let err = Config::parse_from(["turnstile", "--repl-timeout", "0"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("argument must be between 1 and 2147483647 inclusive"),
            "{err}"
        );
        let c = Config::parse_from(["turnstile", "--repl-timeout", "5"]).unwrap();
        assert_eq!(c.repl_timeout, 5);
    }

    /// redis.conf's classes: a class not named keeps its limits (the
    /// replica class defaults to Redis's `256mb 64mb 60`); `slave` is
    /// `replica`; a bare `HARD SOFT SECONDS` is the normal class.
    #[test]
    fn output_limits_take_redis_classes() {
        let d = Config::default().client_output_buffer_limit;
        assert_eq!(d, OutputLimits::default());
        assert_eq!(
            d.to_string(),
            "normal 0 0 0 slave 268435456 67108864 60",
            "as Redis's CONFIG GET shows it"
        );
        let bare = OutputLimits::parse("1mb 512kb 10").unwrap();
        assert_eq!(bare.normal.hard, 1 << 20);
        assert_eq!(bare.replica, d.replica);
        let both = OutputLimits::parse("replica 1gb 100mb 5 normal 0 0 0").unwrap();
        assert_eq!(
            both.replica,
            OutputLimit {
                hard: 1 << 30,
                soft: 100 << 20,
                soft_seconds: 5
            }
        );
        assert_eq!(OutputLimits::parse(&both.to_string()), Ok(both));
        assert_eq!(d.with("SLAVE 1 2 3").unwrap().replica.soft, 2);
        assert_eq!(d.with("replica 1 2"), Err(OutputLimitError::Arguments));
        assert_eq!(d.with(""), Err(OutputLimitError::Arguments));
        assert_eq!(d.with("pubsub 1 2 3"), Err(OutputLimitError::Class));
        assert_eq!(d.with("replica x 2 3"), Err(OutputLimitError::Value));
        assert_eq!(d.with("replica 1 2 -3"), Err(OutputLimitError::Value));
        let c = Config::parse_from(["turnstile", "--client-output-buffer-limit", "replica 0 0 0"])
            .unwrap();
        assert_eq!(c.client_output_buffer_limit.replica, OutputLimit::default());
    }

    #[test]
    fn flag_beats_file_beats_default() {
        let mut f = tempfile();
        writeln!(
            f.1,
            "port = 7000\nmaxclients = 5\nproto-max-bulk-len = \"1mb\""
        )
        .unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let c = Config::parse_from(["turnstile", "--config", &path, "--port", "7001"]).unwrap();
        assert_eq!(c.port, 7001);
        assert_eq!(c.maxclients, 5);
        assert_eq!(c.proto_max_bulk_len, 1024 * 1024);
        std::fs::remove_file(&f.0).unwrap();
    }

    #[test]
    fn file_values_go_through_the_flags_parsers() {
        let mut f = tempfile();
        writeln!(
            f.1,
            "protected-mode = false\nmaxmemory = 1048576\nsnapshot-interval = \"250ms\"\nlua-time-limit = 70\n[rename-command]\nFLUSHALL = \"\"\nCONFIG = \"cfg-x\""
        )
        .unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let c = Config::parse_from(["turnstile", "--config", &path]).unwrap();
        assert!(!c.protected_mode);
        assert_eq!(c.maxmemory, 1 << 20);
        assert_eq!(c.snapshot_interval, std::time::Duration::from_millis(250));
        assert_eq!(c.lua_time_limit, 70);
        assert_eq!(
            c.renames(),
            vec![
                ("CONFIG".to_string(), "cfg-x".to_string()),
                ("FLUSHALL".to_string(), String::new()),
            ]
        );
        std::fs::remove_file(&f.0).unwrap();

        let mut f = tempfile();
        writeln!(f.1, "maxmemory = \"12tb\"").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("{path}: maxmemory: invalid value '12tb'")),
            "{err}"
        );
        std::fs::remove_file(&f.0).unwrap();

        let mut f = tempfile();
        writeln!(f.1, "port = [1, 2]").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!("{path}: port: expected a string, a number or a boolean, not array")
        );
        std::fs::remove_file(&f.0).unwrap();
    }

    #[test]
    fn unknown_file_key_is_an_error() {
        let mut f = tempfile();
        writeln!(f.1, "prot = 1").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path]).unwrap_err();
        assert!(err.to_string().contains("prot"), "{err}");
        std::fs::remove_file(&f.0).unwrap();
        // A key in snake case names the setting it means.
        let mut f = tempfile();
        writeln!(f.1, "protected_mode = \"no\"").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path]).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown setting 'protected_mode': did you mean 'protected-mode'?"),
            "{err}"
        );
        std::fs::remove_file(&f.0).unwrap();
    }

    #[test]
    fn protected_mode_takes_yes_or_no() {
        assert!(Config::parse_from(["turnstile"]).unwrap().protected_mode);
        let off = Config::parse_from(["turnstile", "--protected-mode", "no"]).unwrap();
        assert!(!off.protected_mode);
        assert!(Config::parse_from(["turnstile", "--protected-mode", "maybe"]).is_err());
    }

    #[test]
    fn maxmemory_settings() {
        let c = Config::parse_from([
            "turnstile",
            "--maxmemory",
            "100mb",
            "--maxmemory-policy",
            "volatile-ttl",
        ])
        .unwrap();
        assert_eq!(c.maxmemory, 100 * 1024 * 1024);
        assert_eq!(c.maxmemory_policy, MaxmemoryPolicy::VolatileTtl);
        assert_eq!(
            Config::parse_from(["turnstile"]).unwrap().maxmemory_policy,
            MaxmemoryPolicy::NoEviction
        );
        assert!(Config::parse_from(["turnstile", "--maxmemory-policy", "allkeys-lru"]).is_err());
    }

    #[test]
    fn rename_command_pairs() {
        let c = Config::parse_from([
            "turnstile",
            "--rename-command",
            "FLUSHALL",
            "",
            "--rename-command",
            "CONFIG",
            "cfg-x",
        ])
        .unwrap();
        assert_eq!(
            c.renames(),
            vec![
                ("FLUSHALL".to_string(), String::new()),
                ("CONFIG".to_string(), "cfg-x".to_string())
            ]
        );
    }

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("100"), Ok(100));
        assert_eq!(parse_memory("1k"), Ok(1000));
        assert_eq!(parse_memory("1KB"), Ok(1024));
        assert_eq!(parse_memory("2gb"), Ok(2 << 30));
        assert!(parse_memory("-1").is_err());
        assert!(parse_memory("1tb").is_err());
        assert!(parse_memory("99999999999999gb").is_err());
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        // One grammar with limits' periods: days too.
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1e9").is_err());
        assert!(parse_duration("99999999999999999h").is_err());
        let c = Config::parse_from(["turnstile"]).unwrap();
        assert_eq!(c.snapshot, None);
        assert_eq!(c.snapshot_interval, Duration::from_secs(1));
        assert_eq!(c.tls_port, None);
        assert_eq!(c.threads, 0);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(c.worker_threads(), (cores - 1).max(1));
        let one = Config::parse_from(["turnstile", "--threads", "1"]).unwrap();
        assert_eq!((one.threads, one.worker_threads()), (1, 1));
        assert!(Config::parse_from(["turnstile", "--threads", "-1"]).is_err());
    }

    fn tempfile() -> (PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!(
            "turnstile-config-{}-{:?}.toml",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::File::create(&path).unwrap();
        (path, f)
    }
}
