//! `CONFIG REWRITE` against hostile values and a hostile directory: every
//! value it writes is read back by the config reader (`--config`) to the
//! same value, each on one line of its own, and its temporary file cannot
//! be redirected by a planted symlink.

use std::path::{Path, PathBuf};

use crate::common::*;
use turnstile::Config;

/// Values a client may `CONFIG SET` a password to: line breaks, TOML's
/// quotes, escapes, comments and table headers, a would-be flag, Unicode,
/// and empty (no password).
const HOSTILE: &[&str] = &[
    "a\r\nrequirepass = \"owned\"",
    "\n[section]\nport = 1\n",
    "\r",
    "quote\" and 'single' and '''triple''' and \"\"\"triple\"\"\"",
    "back\\slash\\\\ and \\n not a newline \\u0041",
    "# not a comment",
    "[not-a-table]",
    "tab\tand nul\0and del\x7f and esc\x1b",
    "snow\u{2603}man \u{1F600} \u{2028}\u{FEFF}",
    "-x",
    "--port 1",
    " spaced ",
    "",
];

/// Names and addresses take the same values but those with a control
/// character, which `CONFIG SET` refuses for them.
fn is_name(v: &str) -> bool {
    !v.bytes().any(|b| b.is_ascii_control())
}

/// Every setting `CONFIG SET` may change, set away from its default (the
/// text ones are set to each hostile value in turn).
const OTHERS: &[(&str, &str)] = &[
    ("aof-load-truncated", "no"),
    ("appendfsync", "always"),
    ("auto-aof-rewrite-min-size", "12345678"),
    ("auto-aof-rewrite-percentage", "77"),
    ("busy-reply-threshold", "4321"),
    (
        "client-output-buffer-limit",
        "normal 1000 2000 3 replica 4000 5000 6",
    ),
    ("client-query-buffer-limit", "2097152"),
    ("maxclients", "777"),
    ("maxmemory", "123456789"),
    ("maxmemory-policy", "volatile-ttl"),
    ("policies-max-file-size", "2000000"),
    ("protected-mode", "no"),
    ("proto-max-bulk-len", "2000000"),
    ("repl-backlog-size", "2000000"),
    ("repl-timeout", "33"),
    ("repl-ping-replica-period", "7"),
    ("replica-announce-port", "6380"),
    ("replica-priority", "5"),
    ("rls-handshake-timeout", "1234"),
    ("rls-idle-timeout", "5678"),
    ("rls-maxclients", "99"),
    ("scripts-native", "no"),
    ("timeout", "42"),
];

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "turnstile-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The file's settings as the server reads them at start.
pub(crate) fn read_back(path: &Path) -> Config {
    Config::parse_from([
        "turnstile".into(),
        "--config".into(),
        path.as_os_str().to_owned(),
    ])
    .unwrap_or_else(|e| panic!("{e}\n{}", std::fs::read_to_string(path).unwrap()))
}

/// Every line of the file is blank, a comment, or one whole `key = value`
/// that parses alone: no value spills onto a line of its own.
fn one_value_per_line(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let one: toml::Table = toml::from_str(line)
            .unwrap_or_else(|e| panic!("line {line:?} is not a setting of its own: {e}\n{text}"));
        assert_eq!(one.len(), 1, "{line:?}");
    }
}

async fn config_get(c: &mut Raw, name: &str) -> String {
    c.call(&["CONFIG", "GET", name]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rewritten_value_reads_back_the_same() {
    let dir = temp_dir("rewrite-round-trip");
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, "# kept\nmaxmemory = \"1gb\"\n").unwrap();
    let config_path = path.clone();
    let a = Server::start_with(|c| c.config = Some(config_path)).await;
    let mut c = a.raw().await;
    for (name, value) in OTHERS {
        assert_eq!(
            c.call(&["CONFIG", "SET", name, value]).await,
            "+OK\r\n",
            "{name} {value}"
        );
    }
    for value in HOSTILE {
        let name_value = if is_name(value) { value } else { "fine" };
        for (name, v) in [
            ("masterauth", *value),
            ("masteruser", name_value),
            ("replica-announce-ip", name_value),
            ("requirepass", *value),
        ] {
            assert_eq!(
                c.call(&["CONFIG", "SET", name, v]).await,
                "+OK\r\n",
                "{name} {v:?}"
            );
        }
        if !value.is_empty() {
            assert_eq!(c.call(&["AUTH", value]).await, "+OK\r\n");
        }
        assert_eq!(c.call(&["CONFIG", "REWRITE"]).await, "+OK\r\n", "{value:?}");
        one_value_per_line(&path);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# kept\n"), "{text}");

        let back = read_back(&path);
        let some = |v: &str| (!v.is_empty()).then(|| v.to_string());
        assert_eq!(back.masterauth, some(value), "{text}");
        assert_eq!(back.requirepass, some(value), "{text}");
        assert_eq!(back.masteruser, some(name_value), "{text}");
        assert_eq!(back.replica_announce_ip, some(name_value), "{text}");

        // A server started from the file has every setting A has.
        let b = Server::start_with(|c| {
            *c = Config {
                port: 0,
                metrics_addr: "127.0.0.1:0".into(),
                ..back
            }
        })
        .await;
        let mut cb = b.raw().await;
        if !value.is_empty() {
            assert_eq!(cb.call(&["AUTH", value]).await, "+OK\r\n");
        }
        for (name, _) in OTHERS.iter().chain(&[
            ("masterauth", ""),
            ("masteruser", ""),
            ("replica-announce-ip", ""),
            ("requirepass", ""),
        ]) {
            assert_eq!(
                config_get(&mut cb, name).await,
                config_get(&mut c, name).await,
                "{name} after a rewrite with {value:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A name or an address with a CR or LF (or any control character) in it
/// makes no sense and would end the line it is shown on: refused, and
/// the setting is left as it was. A password may hold them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_line_breaks_are_refused() {
    let srv = Server::start().await;
    let mut c = srv.raw().await;
    for name in ["masteruser", "replica-announce-ip"] {
        for bad in ["a\r\nb", "a\nb", "a\rb", "a\0b", "a\tb"] {
            assert_eq!(
                c.call(&["CONFIG", "SET", name, bad]).await,
                format!(
                    "-ERR CONFIG SET failed (possibly related to argument '{name}') - argument must not contain control characters\r\n"
                ),
                "{name} {bad:?}"
            );
        }
        assert_eq!(c.call(&["CONFIG", "SET", name, "ok"]).await, "+OK\r\n");
        assert_eq!(
            config_get(&mut c, name).await,
            format!("*2\r\n${}\r\n{name}\r\n$2\r\nok\r\n", name.len())
        );
    }
    assert_eq!(
        c.call(&["CONFIG", "SET", "masterauth", "a\r\nb"]).await,
        "+OK\r\n"
    );
}

/// The probe: a symlink planted at the temporary file's fixed name made
/// the rewrite write the config (with lines a client chose) through it,
/// over a file elsewhere, then rename the symlink over the config. Now
/// the temporary file's name cannot be guessed, and a symlink is never
/// written through: every file the directory's symlinks point to is left
/// as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_symlink_is_not_written_through() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = temp_dir("rewrite-symlink");
    let victim = dir.join("authorized_keys");
    std::fs::write(&victim, "ssh-ed25519 AAAA the-owner\n").unwrap();
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, "# kept\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    // The old fixed name, and a spread of others a guess might try.
    for name in [
        "turnstile.rewrite.tmp",
        ".turnstile.toml.tmp",
        "turnstile.toml.tmp",
    ] {
        symlink(&victim, dir.join(name)).unwrap();
    }
    let config_path = path.clone();
    let srv = Server::start_with(|c| c.config = Some(config_path)).await;
    let mut c = srv.raw().await;
    assert_eq!(
        c.call(&[
            "CONFIG",
            "SET",
            "masterauth",
            "x\nssh-ed25519 AAAA attacker"
        ])
        .await,
        "+OK\r\n"
    );
    assert_eq!(c.call(&["CONFIG", "REWRITE"]).await, "+OK\r\n");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "ssh-ed25519 AAAA the-owner\n"
    );
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_file(), "the config is a regular file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o640, "its mode is kept");
    assert_eq!(
        read_back(&path).masterauth.as_deref(),
        Some("x\nssh-ed25519 AAAA attacker")
    );
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // A symlink at the config's own path is read through, then replaced
    // by the new file, as Redis 7.0 replaces it; the file it pointed to
    // is left as it was.
    let elsewhere = dir.join("elsewhere.toml");
    std::fs::write(&elsewhere, "# elsewhere\n").unwrap();
    std::fs::remove_file(&path).unwrap();
    symlink(&elsewhere, &path).unwrap();
    assert_eq!(c.call(&["CONFIG", "REWRITE"]).await, "+OK\r\n");
    assert_eq!(
        std::fs::read_to_string(&elsewhere).unwrap(),
        "# elsewhere\n"
    );
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("# elsewhere\n"));
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A password that is not UTF-8 cannot be a TOML string: the rewrite is
/// refused and the file left as it was, rather than written changed (it
/// was written with U+FFFD, and the next start had another password).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_toml_cannot_hold_is_refused() {
    let dir = temp_dir("rewrite-binary-password");
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, "# kept\n").unwrap();
    let config_path = path.clone();
    let srv = Server::start_with(|c| c.config = Some(config_path)).await;
    let mut c = srv.raw().await;
    let set = b"*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$11\r\nrequirepass\r\n$3\r\na\xffb\r\n";
    assert_eq!(c.roundtrip(set).await, "+OK\r\n");
    let auth = b"*2\r\n$4\r\nAUTH\r\n$3\r\na\xffb\r\n";
    assert_eq!(c.roundtrip(auth).await, "+OK\r\n");
    assert_eq!(
        c.call(&["CONFIG", "REWRITE"]).await,
        "-ERR Rewriting config file: requirepass is not UTF-8 text, which the config file cannot hold\r\n"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# kept\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file that cannot be written is an error in `strerror`'s words, as
/// Redis words it (no Rust `(os error N)`), and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_cannot_be_written_is_named_in_redis_words() {
    let dir = temp_dir("rewrite-gone");
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, "# kept\n").unwrap();
    let config_path = path.clone();
    let srv = Server::start_with(|c| c.config = Some(config_path)).await;
    let mut c = srv.raw().await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        c.call(&["CONFIG", "REWRITE"]).await,
        "-ERR Rewriting config file: No such file or directory\r\n"
    );
    assert!(!dir.exists());
}
