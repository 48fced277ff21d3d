//! CONFIG GET / SET / RESETSTAT / HELP over the settings `CONFIG SET` may
//! change at run time (`state::Settings`) and a few read-only facts clients
//! ask for (redis-benchmark reads `save` and `appendonly` at start).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{error::show, CmdError, Ctx};
use crate::config::{number, OutputLimits};
use crate::glob;
use crate::protocol::Request;
use crate::state::{Settings, State};

enum Kind {
    /// A number in a `Settings` atomic, read and checked as its flag is
    /// (`config::number`: its range, memory units for a size).
    Number {
        field: fn(&Settings) -> &AtomicU64,
        number: &'static crate::config::Number,
    },
    Password,
    /// A yes/no setting.
    Flag(fn(&Settings) -> &AtomicBool),
    /// `maxmemory-policy`.
    Policy,
    /// One of a few names, kept as its index.
    Choice(
        fn(&Settings) -> &std::sync::atomic::AtomicU8,
        &'static [&'static str],
    ),
    /// `client-output-buffer-limit`: the classes' limits.
    OutputLimits,
    /// A text setting; empty is none. `Line::Name` for a name or an
    /// address, which `CONFIG SET` refuses with a control character in it
    /// (a CR or LF would end the line it is shown on, in `INFO` or the
    /// `REPLCONF` a replica sends); a password may hold any bytes.
    Text(fn(&Settings) -> &parking_lot::RwLock<Option<String>>, Line),
    ReadOnly(fn(&State) -> String),
}

/// What a text setting may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Line {
    Name,
    Secret,
}

struct Param {
    name: &'static str,
    kind: Kind,
}

const PARAMS: &[Param] = &[
    Param {
        name: "aof-load-truncated",
        kind: Kind::Flag(|s| &s.aof_load_truncated),
    },
    Param {
        name: "appendfilename",
        kind: Kind::ReadOnly(|s| {
            let path = s.aof.path();
            path.file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned())
        }),
    },
    Param {
        name: "appendfsync",
        kind: Kind::Choice(|s| &s.appendfsync, &crate::persist::aof::Fsync::NAMES),
    },
    Param {
        name: "appendonly",
        kind: Kind::Flag(|s| &s.appendonly),
    },
    Param {
        name: "auto-aof-rewrite-min-size",
        kind: Kind::Number {
            field: |s| &s.auto_aof_rewrite_min_size,
            number: &number::AUTO_AOF_REWRITE_MIN_SIZE,
        },
    },
    Param {
        name: "auto-aof-rewrite-percentage",
        kind: Kind::Number {
            field: |s| &s.auto_aof_rewrite_percentage,
            number: &number::AUTO_AOF_REWRITE_PERCENTAGE,
        },
    },
    Param {
        name: "bind",
        kind: Kind::ReadOnly(|s| s.settings.bind.clone()),
    },
    Param {
        name: "busy-reply-threshold",
        kind: Kind::Number {
            field: |s| &s.lua_time_limit_ms,
            number: &number::LUA_TIME_LIMIT,
        },
    },
    Param {
        name: "client-output-buffer-limit",
        kind: Kind::OutputLimits,
    },
    Param {
        name: "client-query-buffer-limit",
        kind: Kind::Number {
            field: |s| &s.client_query_buffer_limit,
            number: &number::CLIENT_QUERY_BUFFER_LIMIT,
        },
    },
    Param {
        name: "databases",
        kind: Kind::ReadOnly(|_| "1".into()),
    },
    Param {
        name: "lua-time-limit",
        kind: Kind::Number {
            field: |s| &s.lua_time_limit_ms,
            number: &number::LUA_TIME_LIMIT,
        },
    },
    Param {
        name: "masterauth",
        kind: Kind::Text(|s| &s.masterauth, Line::Secret),
    },
    Param {
        name: "masteruser",
        kind: Kind::Text(|s| &s.masteruser, Line::Name),
    },
    Param {
        name: "maxclients",
        kind: Kind::Number {
            field: |s| &s.maxclients,
            number: &number::MAXCLIENTS,
        },
    },
    Param {
        name: "maxmemory",
        kind: Kind::Number {
            field: |s| &s.maxmemory,
            number: &number::MAXMEMORY,
        },
    },
    Param {
        name: "maxmemory-policy",
        kind: Kind::Policy,
    },
    Param {
        name: "policies-max-file-size",
        kind: Kind::Number {
            field: |s| &s.policies_max_file_size,
            number: &number::POLICIES_MAX_FILE_SIZE,
        },
    },
    Param {
        name: "port",
        kind: Kind::ReadOnly(|s| s.addr.port().to_string()),
    },
    Param {
        name: "protected-mode",
        kind: Kind::Flag(|s| &s.protected_mode),
    },
    Param {
        name: "proto-max-bulk-len",
        kind: Kind::Number {
            field: |s| &s.proto_max_bulk_len,
            number: &number::PROTO_MAX_BULK_LEN,
        },
    },
    Param {
        name: "repl-backlog-size",
        kind: Kind::Number {
            field: |s| &s.repl_backlog_size,
            number: &number::REPL_BACKLOG_SIZE,
        },
    },
    Param {
        name: "repl-timeout",
        kind: Kind::Number {
            field: |s| &s.repl_timeout_secs,
            number: &number::REPL_TIMEOUT,
        },
    },
    Param {
        name: "repl-ping-replica-period",
        kind: Kind::Number {
            field: |s| &s.repl_ping_replica_period,
            number: &number::REPL_PING_REPLICA_PERIOD,
        },
    },
    Param {
        name: "replica-announce-ip",
        kind: Kind::Text(|s| &s.replica_announce_ip, Line::Name),
    },
    Param {
        name: "replica-announce-port",
        kind: Kind::Number {
            field: |s| &s.replica_announce_port,
            number: &number::REPLICA_ANNOUNCE_PORT,
        },
    },
    Param {
        name: "replica-priority",
        kind: Kind::Number {
            field: |s| &s.replica_priority,
            number: &number::REPLICA_PRIORITY,
        },
    },
    Param {
        name: "replicaof",
        kind: Kind::ReadOnly(|s| match s.replication.role() {
            crate::replication::Role::Primary => String::new(),
            crate::replication::Role::Replica { host, port } => format!("{host} {port}"),
        }),
    },
    Param {
        name: "requirepass",
        kind: Kind::Password,
    },
    Param {
        name: "rls-handshake-timeout",
        kind: Kind::Number {
            field: |s| &s.rls_handshake_timeout_ms,
            number: &number::RLS_HANDSHAKE_TIMEOUT,
        },
    },
    Param {
        name: "rls-idle-timeout",
        kind: Kind::Number {
            field: |s| &s.rls_idle_timeout_ms,
            number: &number::RLS_IDLE_TIMEOUT,
        },
    },
    Param {
        name: "rls-max-concurrent-streams",
        kind: Kind::ReadOnly(|s| s.settings.rls_max_concurrent_streams.to_string()),
    },
    Param {
        name: "rls-max-message-size",
        kind: Kind::ReadOnly(|s| s.settings.rls_max_message_size.to_string()),
    },
    Param {
        name: "rls-maxclients",
        kind: Kind::Number {
            field: |s| &s.rls_maxclients,
            number: &number::RLS_MAXCLIENTS,
        },
    },
    Param {
        name: "save",
        // Redis's "<seconds> <changes>": with --snapshot, a snapshot
        // follows any change within the interval.
        kind: Kind::ReadOnly(|s| {
            s.persist.as_ref().map_or(String::new(), |p| {
                format!("{} 1", p.interval().as_secs().max(1))
            })
        }),
    },
    Param {
        name: "scripts-native",
        kind: Kind::Flag(|s| &s.scripts_native),
    },
    Param {
        name: "tls-port",
        kind: Kind::ReadOnly(|s| s.tls_port.unwrap_or(0).to_string()),
    },
    Param {
        name: "top-keys",
        kind: Kind::ReadOnly(|s| s.stats.top.keys().to_string()),
    },
    Param {
        name: "top-sample",
        kind: Kind::ReadOnly(|s| s.stats.top.sample().to_string()),
    },
    Param {
        name: "top-window",
        kind: Kind::ReadOnly(|s| (s.stats.top.window_ns() / 1_000_000_000).to_string()),
    },
    Param {
        name: "timeout",
        kind: Kind::Number {
            field: |s| &s.timeout_secs,
            number: &number::TIMEOUT,
        },
    },
];

/// Parameters Redis clients read that are not Turnstile flags: redis.conf
/// names with a fixed answer, and Redis 7's new name for
/// `lua-time-limit`. The config file has no such key: `CONFIG REWRITE`
/// writes none of them.
const NOT_FLAGS: &[&str] = &["databases", "save", "busy-reply-threshold"];

fn value_of(state: &State, p: &Param) -> String {
    match &p.kind {
        Kind::ReadOnly(f) => f(state),
        _ => setting(&state.settings, p).unwrap_or_default(),
    }
}

/// The value of a setting `CONFIG SET` may change (`None` for the rest).
fn setting(settings: &Settings, p: &Param) -> Option<String> {
    Some(match &p.kind {
        Kind::Number { field, .. } => field(settings).load(Ordering::Relaxed).to_string(),
        Kind::Password => settings
            .password()
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .unwrap_or_default(),
        Kind::Flag(field) => match field(settings).load(Ordering::Relaxed) {
            true => "yes".into(),
            false => "no".into(),
        },
        Kind::Policy => settings.policy().name().into(),
        Kind::Choice(field, names) => names
            .get(usize::from(field(settings).load(Ordering::Relaxed)))
            .map_or(String::new(), |n| n.to_string()),
        Kind::OutputLimits => settings.output_limits().to_string(),
        Kind::Text(field, _) => field(settings).read().clone().unwrap_or_default(),
        Kind::ReadOnly(_) => return None,
    })
}

/// ```text
/// CONFIG REWRITE
/// ```
/// Writes the settings in force back to the `--config` file, as Redis
/// rewrites redis.conf: a key the file has is updated, a setting away from
/// its default is added, the rest of the file (comments, order, settings
/// `CONFIG SET` cannot change) is kept. `replicaof` follows the role
/// (Sentinel rewrites it at every failover). The file is replaced whole,
/// by rename, so a crash leaves the old one.
pub fn rewrite(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let state = ctx.state;
    let Some(path) = &state.config_file else {
        return Err(CmdError::err("The server is running without a config file"));
    };
    let failed = |e: &dyn std::fmt::Display| {
        tracing::warn!(path = %path.display(), error = %e, "CONFIG REWRITE failed");
        CmdError::err(format!("Rewriting config file: {e}"))
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(failed(&crate::util::strerror(&e))),
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| failed(&e))?;
    let defaults = Settings::new(&crate::config::Config::default(), None);
    for p in PARAMS {
        let (live, default) = match &p.kind {
            Kind::ReadOnly(_) if p.name == "replicaof" => (
                match state.replication.role() {
                    crate::replication::Role::Primary => String::new(),
                    crate::replication::Role::Replica { host, port } => {
                        format!("{host}:{port}")
                    }
                },
                String::new(),
            ),
            Kind::ReadOnly(_) => continue,
            // The reader would refuse the key (`lua-time-limit` carries it).
            _ if NOT_FLAGS.contains(&p.name) => continue,
            Kind::Password if state.password_from_file => continue,
            Kind::Password => {
                // The file is TOML, whose strings are Unicode: a password
                // of other bytes would come back changed at the next start.
                let live = state.settings.password().unwrap_or_default();
                let live = String::from_utf8(live.to_vec()).map_err(|_| {
                    failed(&"requirepass is not UTF-8 text, which the config file cannot hold")
                })?;
                (live, String::new())
            }
            _ => (
                setting(&state.settings, p).unwrap_or_default(),
                setting(&defaults, p).unwrap_or_default(),
            ),
        };
        if !doc.contains_key(p.name) && live == default {
            continue;
        }
        // A value the file already says, in its own words ("1gb"), stays.
        let said = doc.get(p.name).and_then(|v| match v.as_value()? {
            toml_edit::Value::String(s) => Some(s.value().clone()),
            toml_edit::Value::Integer(n) => Some(n.value().to_string()),
            toml_edit::Value::Boolean(b) => Some(if *b.value() { "yes" } else { "no" }.into()),
            _ => None,
        });
        let same = said.is_some_and(|said| match &p.kind {
            Kind::Number { number, .. } => number.parse(&said).is_ok_and(|n| n.to_string() == live),
            Kind::OutputLimits => OutputLimits::parse(&said) == OutputLimits::parse(&live),
            _ => said == live,
        });
        if same {
            continue;
        }
        let text_kind = matches!(p.kind, Kind::Password | Kind::Text(..) | Kind::ReadOnly(_));
        if text_kind && live.is_empty() {
            doc.remove(p.name);
            continue;
        }
        doc[p.name] = match (&p.kind, live.parse::<i64>()) {
            (Kind::Number { .. }, Ok(n)) => toml_edit::value(n),
            (Kind::Flag(_), _) => toml_edit::value(live == "yes"),
            _ => toml_edit::Item::Value(one_line(&live)),
        };
    }
    let mut text = doc.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    write_file(path, text.as_bytes()).map_err(|e| failed(&crate::util::strerror(&e)))?;
    tracing::info!(path = %path.display(), "CONFIG REWRITE executed with success");
    ctx.out.ok();
    Ok(())
}

/// `text` as a TOML basic string on one line: `"`, `\\` and every
/// control character escaped. `toml_edit` would choose a multi-line
/// string for a value with a line break, putting text a client chose
/// (`CONFIG SET masterauth`) on lines of its own.
fn one_line(text: &str) -> toml_edit::Value {
    use std::fmt::Write;
    let mut repr = String::with_capacity(text.len() + 2);
    repr.push('"');
    for c in text.chars() {
        match c {
            '"' => repr.push_str("\\\""),
            '\\' => repr.push_str("\\\\"),
            '\n' => repr.push_str("\\n"),
            '\r' => repr.push_str("\\r"),
            '\t' => repr.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(repr, "\\u{:04X}", u32::from(c));
            }
            c => repr.push(c),
        }
    }
    repr.push('"');
    // A basic string of escaped text always parses; its repr is kept.
    repr.parse()
        .unwrap_or_else(|_| toml_edit::Value::from(text.to_string()))
}

/// Replaces the config file with `text` as the snapshot writer replaces
/// a snapshot (`store::snapshot::create_temp` and `install`): a sibling
/// temporary file of a name no one can guess, created only where nothing
/// is (`O_EXCL`, `O_NOFOLLOW`: a symlink planted there is refused, not
/// written through), with the old file's permissions (0600 for a new
/// one: it may hold passwords), fsynced, renamed over the path, the
/// directory fsynced. A symlink at the path itself is replaced by the new
/// file, not followed, as Redis 7.0 replaces it.
fn write_file(path: &std::path::Path, text: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let (mut file, tmp) = crate::store::snapshot::create_temp(path)?;
    let written = (|| {
        if let Ok(old) = std::fs::metadata(path) {
            file.set_permissions(old.permissions())?;
        }
        file.write_all(text)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    crate::store::snapshot::install(&tmp, path).map_err(std::io::Error::other)
}

/// ```text
/// CONFIG GET parameter [parameter ...]
/// ```
pub fn get(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let mut found: Vec<&Param> = Vec::new();
    for pattern in req.args().skip(2) {
        let pattern = pattern.to_ascii_lowercase();
        for p in PARAMS {
            if glob::matches(&pattern, p.name.as_bytes()) && !found.iter().any(|f| f.name == p.name)
            {
                found.push(p);
            }
        }
    }
    ctx.out.map(found.len());
    for p in found {
        ctx.out.bulk_str(p.name);
        ctx.out.bulk_str(&value_of(ctx.state, p));
    }
    Ok(())
}

/// ```text
/// CONFIG SET parameter value [parameter value ...]
/// ```
/// All-or-nothing: every pair is checked before any is applied.
pub fn set(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if !req.len().is_multiple_of(2) {
        return Err(CmdError::err(format!(
            "Unknown option or number of arguments for CONFIG SET - '{}'",
            show(req.arg(req.len() - 1))
        )));
    }
    enum Change<'a> {
        Number(&'a AtomicU64, u64),
        Flag(&'a AtomicBool, bool),
        Policy(u8),
        Choice(&'a std::sync::atomic::AtomicU8, u8),
        OutputLimits(OutputLimits),
        Password(&'a [u8]),
        Text(&'a parking_lot::RwLock<Option<String>>, Option<String>),
    }
    let mut changes = Vec::new();
    for i in (2..req.len()).step_by(2) {
        let (name, value) = (req.arg(i), req.arg(i + 1));
        let Some(p) = PARAMS
            .iter()
            .find(|p| p.name.as_bytes().eq_ignore_ascii_case(name))
        else {
            return Err(CmdError::err(format!(
                "Unknown option or number of arguments for CONFIG SET - '{}'",
                show(name)
            )));
        };
        let failed = |why: &str| {
            CmdError::err(format!(
                "CONFIG SET failed (possibly related to argument '{}') - {why}",
                p.name
            ))
        };
        changes.push(match &p.kind {
            Kind::ReadOnly(_) => return Err(failed("can't set immutable config")),
            Kind::Password => Change::Password(value),
            Kind::Text(_, Line::Name) if value.iter().any(u8::is_ascii_control) => {
                return Err(failed("argument must not contain control characters"))
            }
            Kind::Text(field, _) => Change::Text(
                field(&ctx.state.settings),
                (!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned()),
            ),
            Kind::Flag(field) => {
                let text = std::str::from_utf8(value).unwrap_or("");
                let b = crate::config::parse_yes_no(text)
                    .map_err(|_| failed("argument must be 'yes' or 'no'"))?;
                Change::Flag(field(&ctx.state.settings), b)
            }
            Kind::Policy => {
                let text = std::str::from_utf8(value).unwrap_or("");
                let p = crate::config::MaxmemoryPolicy::parse(text).map_err(|_| {
                    failed("argument(s) must be one of the following: noeviction, volatile-ttl")
                })?;
                Change::Policy(p.index())
            }
            Kind::Choice(field, names) => {
                let i = names
                    .iter()
                    .position(|n| n.as_bytes().eq_ignore_ascii_case(value))
                    .ok_or_else(|| {
                        failed(&format!(
                            "argument(s) must be one of the following: {}",
                            names.join(", ")
                        ))
                    })?;
                Change::Choice(field(&ctx.state.settings), i as u8)
            }
            Kind::OutputLimits => {
                let text = std::str::from_utf8(value).unwrap_or("");
                let limits = ctx.state.settings.output_limits();
                Change::OutputLimits(limits.with(text).map_err(|e| failed(&e.to_string()))?)
            }
            Kind::Number { field, number } => {
                let text = std::str::from_utf8(value).unwrap_or("");
                let n = number.parse_config_set(text).map_err(|e| failed(&e))?;
                Change::Number(field(&ctx.state.settings), n)
            }
        });
    }
    for c in changes {
        match c {
            Change::Number(field, n) => field.store(n, Ordering::Relaxed),
            Change::Flag(field, b) => field.store(b, Ordering::Relaxed),
            Change::Policy(i) => ctx
                .state
                .settings
                .maxmemory_policy
                .store(i, Ordering::Relaxed),
            Change::Choice(field, i) => field.store(i, Ordering::Relaxed),
            Change::OutputLimits(l) => ctx.state.settings.set_output_limits(l),
            Change::Password(p) => ctx.state.settings.set_password(Some(p)),
            Change::Text(field, v) => *field.write() = v,
        }
    }
    // The append-only file's thread follows `appendonly` and
    // `appendfsync` at its next round: now.
    let s = &ctx.state.settings;
    let fsync = crate::persist::aof::Fsync::from_index(s.appendfsync.load(Ordering::Relaxed));
    ctx.state.aof.set_fsync(fsync);
    ctx.state.aof.follow(s.appendonly.load(Ordering::Relaxed));
    ctx.out.ok();
    Ok(())
}

/// ```text
/// CONFIG RESETSTAT
/// ```
pub fn resetstat(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.state.stats.reset();
    ctx.out.ok();
    Ok(())
}

/// ```text
/// CONFIG HELP
/// ```
pub fn help(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    crate::cmd::registry::help::write_help(
        ctx,
        "CONFIG",
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
        ],
    );
    Ok(())
}

/// The parameters `CONFIG SET` changes, by name (for the docs' check).
pub fn settable() -> impl Iterator<Item = &'static str> {
    PARAMS
        .iter()
        .filter(|p| !matches!(p.kind, Kind::ReadOnly(_)))
        .map(|p| p.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// A numeric parameter's flag accepts exactly what `CONFIG SET`
    /// accepts: at each end of its range and one past it. A flag took
    /// `--maxclients 0` and `--proto-max-bulk-len 1`, which `CONFIG SET`
    /// refuses, when the two kept their ranges apart.
    #[test]
    fn numeric_flags_accept_what_config_set_accepts() {
        let mut checked = 0;
        for p in PARAMS {
            let Kind::Number { number, .. } = &p.kind else {
                continue;
            };
            if NOT_FLAGS.contains(&p.name) {
                continue;
            }
            let (min, max) = (i128::from(number.min), i128::from(number.max));
            for v in [min - 1, min, min + 1, max - 1, max, max + 1] {
                let text = v.to_string();
                let at_runtime = number.parse_config_set(&text).is_ok();
                assert_eq!(
                    at_runtime,
                    (min..=max).contains(&v),
                    "CONFIG SET {} {v}",
                    p.name
                );
                let flag = format!("--{}={v}", p.name);
                let at_start = crate::config::Config::parse_from(["turnstile", &flag]).is_ok();
                assert_eq!(
                    at_start, at_runtime,
                    "{flag} at start-up, against CONFIG SET"
                );
            }
            checked += 1;
        }
        assert!(checked >= 15, "{checked} numeric parameters checked");
    }

    /// A `CONFIG` parameter is the flag of the same name (and the config
    /// file's key): one name per setting, wherever it is set.
    #[test]
    fn every_parameter_is_named_as_its_flag() {
        let cli = crate::config::Cli::command();
        let flags: Vec<&str> = cli.get_arguments().filter_map(|a| a.get_long()).collect();
        for p in PARAMS {
            if NOT_FLAGS.contains(&p.name) {
                assert!(
                    !flags.contains(&p.name),
                    "{} is a flag now: take it off NOT_FLAGS",
                    p.name
                );
                continue;
            }
            assert!(
                flags.contains(&p.name),
                "CONFIG {} has no --{0} flag",
                p.name
            );
        }
        let mut names: Vec<&str> = PARAMS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        assert!(
            names.windows(2).all(|w| w[0] < w[1]),
            "CONFIG parameters are listed once each, in order: {names:?}"
        );
    }
}
