//! CONFIG GET / SET / REWRITE / RESETSTAT / HELP over the settings'
//! table (`config::table`): the settings `CONFIG SET` may change at run
//! time (`config::Settings`) and a few read-only facts clients ask for
//! (redis-benchmark reads `save` and `appendonly` at start).

use super::{error::show, CmdError, Ctx};
use crate::config::table::{self, Setting};
use crate::config::{Kind, Val, SETTINGS};
use crate::glob;
use crate::protocol::Request;
use crate::state::State;

/// Every `CONFIG` parameter (names and aliases) with its setting, in
/// name order: `CONFIG GET`'s order.
fn parameters() -> &'static [(&'static str, &'static Setting)] {
    static ALL: std::sync::OnceLock<Vec<(&str, &Setting)>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut all: Vec<(&str, &Setting)> = SETTINGS
            .iter()
            .filter(|s| s.is(table::CONFIG))
            .flat_map(|s| {
                std::iter::once(s.name)
                    .chain(s.aliases.iter().copied())
                    .map(move |n| (n, s))
            })
            .collect();
        all.sort_unstable_by_key(|(n, _)| *n);
        all
    })
}

/// A [`table::FACT`]: what the running server reports, which only the
/// layers above config know.
fn fact(state: &State, s: &Setting) -> String {
    use crate::replication::Role;
    match s.name {
        "port" => state.addr.port().to_string(),
        "tls-port" => state.tls_port.unwrap_or(0).to_string(),
        "replicaof" => match state.replication.role() {
            Role::Primary => String::new(),
            Role::Replica { host, port } => format!("{host} {port}"),
        },
        "top-keys" => state.stats.top.keys().to_string(),
        "databases" => "1".into(),
        // Redis's "<seconds> <changes>": with --snapshot, a snapshot
        // follows any change within the interval.
        "save" => state.persist.as_ref().map_or(String::new(), |p| {
            format!("{} 1", p.interval().as_secs().max(1))
        }),
        _ => String::new(),
    }
}

/// A parameter's value, as `CONFIG GET` shows it.
fn value_of(state: &State, s: &Setting) -> String {
    if s.is(table::FACT) {
        return fact(state, s);
    }
    s.current(&state.settings)
        .map_or(String::new(), |v| s.kind.show(&v))
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
    let defaults = crate::config::Config::default();
    let written = parameters()
        .iter()
        .filter(|(name, s)| *name == s.name && (s.is(table::MODIFIABLE) || s.name == "replicaof"));
    for &(_, p) in written {
        let default = p
            .value(&defaults)
            .map_or(String::new(), |v| p.kind.show(&v));
        let live = match p.kind {
            _ if p.name == "replicaof" => match state.replication.role() {
                crate::replication::Role::Primary => String::new(),
                crate::replication::Role::Replica { host, port } => format!("{host}:{port}"),
            },
            Kind::Password if state.password_from_file => continue,
            Kind::Password => {
                // The file is TOML, whose strings are Unicode: a password
                // of other bytes would come back changed at the next start.
                let live = state.settings.password().unwrap_or_default();
                String::from_utf8(live.to_vec()).map_err(|_| {
                    failed(&"requirepass is not UTF-8 text, which the config file cannot hold")
                })?
            }
            _ => value_of(state, p),
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
        let same = said.is_some_and(|said| match p.kind {
            Kind::Number(number) => number.parse(&said).is_ok_and(|n| n.to_string() == live),
            Kind::Limits => {
                crate::config::OutputLimits::parse(&said)
                    == crate::config::OutputLimits::parse(&live)
            }
            _ => said == live,
        });
        if same {
            continue;
        }
        let text_kind = matches!(p.kind, Kind::Password | Kind::Text(_) | Kind::Other(_));
        if text_kind && live.is_empty() {
            doc.remove(p.name);
            continue;
        }
        doc[p.name] = match (p.kind, live.parse::<i64>()) {
            (Kind::Number(_), Ok(n)) => toml_edit::value(n),
            (Kind::YesNo, _) => toml_edit::value(live == "yes"),
            _ => toml_edit::Item::Value(one_line(&live)),
        };
    }
    if state.settings.config.aclfile.is_none() {
        let lines = user_lines(ctx).map_err(|e| failed(&e))?;
        if lines.is_empty() {
            doc.remove("user");
        } else {
            // On one line, each string escaped as `one_line` escapes it:
            // no rule can spill onto a line of its own.
            let mut array = toml_edit::Array::new();
            for line in &lines {
                array.push_formatted(one_line(line));
            }
            array.fmt();
            doc["user"] = toml_edit::value(array);
        }
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

/// The users for the config file's `user` array, as Redis's CONFIG
/// REWRITE writes `user` lines when there is no ACL file: each as `ACL
/// LIST` prints it, without its `user` word, passwords as digests. The
/// `default` user only if it is not what a start would make of it (on, every
/// key and command, `requirepass`'s password): `requirepass` stays its
/// password otherwise.
fn user_lines(ctx: &Ctx<'_>) -> Result<Vec<String>, String> {
    let acl = &ctx.state.acl;
    let fresh = crate::acl::Acl::new(ctx.state.settings.password().as_deref());
    let fresh_default = fresh.default_user().load();
    let mut lines = Vec::new();
    for u in acl.users() {
        if &*u.name == b"default" && *u == *fresh_default {
            continue;
        }
        let text = crate::acl::file::render([&*u], ctx.registry.acl())?;
        let text = String::from_utf8(text).map_err(|_| {
            format!(
                "user '{}' is not UTF-8 text, which the config file cannot hold",
                String::from_utf8_lossy(&u.name)
            )
        })?;
        let line = text.trim_end_matches('\n');
        lines.push(line.strip_prefix("user ").unwrap_or(line).to_string());
    }
    Ok(lines)
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
pub(super) fn write_file(path: &std::path::Path, text: &[u8]) -> std::io::Result<()> {
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
    let mut found: Vec<(&str, &Setting)> = Vec::new();
    for pattern in req.args().skip(2) {
        let pattern = pattern.to_ascii_lowercase();
        for &(name, s) in parameters() {
            if glob::matches(&pattern, name.as_bytes()) && !found.iter().any(|f| f.0 == name) {
                found.push((name, s));
            }
        }
    }
    ctx.out.map(found.len());
    for (name, s) in found {
        ctx.out.bulk_str(name);
        ctx.out.bulk_str(&value_of(ctx.state, s));
    }
    Ok(())
}

/// ```text
/// CONFIG SET parameter value [parameter value ...]
/// ```
/// All-or-nothing: every pair is checked before any is applied; then each
/// setting changed runs its apply step (the append-only file's switch).
pub fn set(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if !req.len().is_multiple_of(2) {
        return Err(CmdError::err(format!(
            "Unknown option or number of arguments for CONFIG SET - '{}'",
            show(req.arg(req.len() - 1))
        )));
    }
    let settings = &ctx.state.settings;
    let mut changes: Vec<(&Setting, Val)> = Vec::new();
    for i in (2..req.len()).step_by(2) {
        let (name, value) = (req.arg(i), req.arg(i + 1));
        let Some((param, s)) = parameters()
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        else {
            return Err(CmdError::err(format!(
                "Unknown option or number of arguments for CONFIG SET - '{}'",
                show(name)
            )));
        };
        let v = match s.is(table::MODIFIABLE) {
            true => s.kind.parse_set(value, s.current(settings)),
            false => Err("can't set immutable config".into()),
        }
        .map_err(|why| {
            CmdError::err(format!(
                "CONFIG SET failed (possibly related to argument '{param}') - {why}"
            ))
        })?;
        changes.push((s, v));
    }
    for (s, v) in &changes {
        if let Some(cell) = s.live {
            cell(settings).store(v.clone());
        }
    }
    for (s, _) in changes {
        if let Some(apply) = s.apply {
            apply(ctx.state);
        }
    }
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
    parameters()
        .iter()
        .filter(|(_, s)| s.is(table::MODIFIABLE))
        .map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A numeric parameter's flag accepts exactly what `CONFIG SET`
    /// accepts: at each end of its range and one past it. A flag took
    /// `--maxclients 0` and `--proto-max-bulk-len 1`, which `CONFIG SET`
    /// refuses, when the two kept their ranges apart.
    #[test]
    fn numeric_flags_accept_what_config_set_accepts() {
        let mut checked = 0;
        for p in SETTINGS.iter().filter(|s| s.is(table::MODIFIABLE)) {
            let Kind::Number(number) = p.kind else {
                continue;
            };
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

    /// `CONFIG SET` checks every pair before it stores any, then runs the
    /// apply step of each setting it changed: `appendfsync` is the file's
    /// policy at once (no round of the writer thread in between), and an
    /// alias changes its setting.
    #[test]
    fn config_set_applies_each_setting_it_changed() {
        use crate::harness::{encode_request, Harness};
        use crate::persist::aof::Fsync;
        let mut h = Harness::new(crate::clock::Nanos(
            1_700_000_000 * crate::clock::Nanos::PER_SEC,
        ));
        let aof = h.state.aof.clone();
        let mut run = |args: &[&str]| String::from_utf8(h.feed(&encode_request(args))).unwrap();
        assert_eq!(run(&["CONFIG", "SET", "appendfsync", "always"]), "+OK\r\n");
        let refused = run(&["CONFIG", "SET", "appendfsync", "no", "maxclients", "0"]);
        assert!(
            refused
                .starts_with("-ERR CONFIG SET failed (possibly related to argument 'maxclients')"),
            "{refused}"
        );
        assert_eq!(
            run(&["CONFIG", "SET", "busy-reply-threshold", "70"]),
            "+OK\r\n"
        );
        assert_eq!(
            run(&["CONFIG", "GET", "lua-time-limit"]),
            "*2\r\n$14\r\nlua-time-limit\r\n$2\r\n70\r\n"
        );
        assert_eq!(
            aof.fsync(),
            Fsync::Always,
            "the refused SET changed nothing"
        );
        assert_eq!(run(&["CONFIG", "SET", "appendfsync", "no"]), "+OK\r\n");
        assert_eq!(aof.fsync(), Fsync::No);
    }

    /// Every fact `CONFIG GET` reports is answered here.
    #[test]
    fn every_fact_is_answered() {
        let answered = [
            "port",
            "tls-port",
            "replicaof",
            "top-keys",
            "databases",
            "save",
        ];
        for s in SETTINGS.iter().filter(|s| s.is(table::FACT)) {
            assert!(answered.contains(&s.name), "{}", s.name);
        }
    }
}
