//! What a newcomer meets in the first hour, through the real binary: each
//! mistake's message names what to fix, and an unprotected listener is
//! warned about at start.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn turnstile() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    c.env("NO_COLOR", "1")
        .env_remove("TURNSTILE_PORT")
        .env_remove("TURNSTILE_MAXMEMORY");
    c
}

/// Runs a command expected to exit on its own (bounded); its output.
fn run(mut c: Command) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_missing_password_file_is_an_error_naming_the_flag() {
    let mut c = turnstile();
    c.args([
        "--port",
        "0",
        "--metrics-addr",
        "off",
        "--requirepass-file",
        "/nonexistent/pw",
    ]);
    let o = run(c);
    assert!(!o.status.success());
    assert!(
        text(&o)
            .contains("--requirepass-file: cannot read /nonexistent/pw: No such file or directory"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_bad_size_lists_the_units() {
    let mut c = turnstile();
    c.args(["--maxmemory", "12zz"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("invalid size unit in '12zz': use bytes, or a whole number with k, kb, m, mb, g or gb (k = 1000, kb = 1024)"),
        "{}",
        text(&o)
    );
}

#[test]
fn an_ambiguous_duration_flag_offers_both_readings() {
    let mut c = turnstile();
    c.args(["--snapshot-interval", "1M"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains(
            "duration '1M' is ambiguous: write 1m for minutes (M alone could mean months)"
        ),
        "{}",
        text(&o)
    );
}

#[test]
fn a_bad_environment_variable_is_named() {
    let mut c = turnstile();
    c.env("TURNSTILE_PORT", "abc");
    let o = run(c);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("invalid value in the environment variable TURNSTILE_PORT (for --port): invalid value 'abc'"),
        "{}",
        text(&o)
    );
    // The same mistake on the command line names the flag, as clap does.
    let mut c = turnstile();
    c.args(["--port", "abc"]);
    let o = run(c);
    assert!(
        text(&o).contains("invalid value 'abc' for '--port <PORT>'"),
        "{}",
        text(&o)
    );
}

/// A port in use (a local redis-server, usually) names the flag that
/// chooses another.
#[test]
fn a_port_clash_names_port() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut c = turnstile();
    c.args(["--port", &port, "--metrics-addr", "off"]);
    let o = run(c);
    assert!(!o.status.success());
    assert!(
        text(&o).contains(&format!("cannot listen on 127.0.0.1:{port}: "))
            && text(&o).contains("choose another with --port PORT"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_metrics_port_clash_names_metrics_addr() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut c = turnstile();
    c.args(["--port", "0", "--metrics-addr", &addr]);
    let o = run(c);
    assert!(!o.status.success());
    assert!(
        text(&o).contains(&format!("cannot listen on {addr} for the metrics endpoint")),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("--metrics-addr off"), "{}", text(&o));
}

#[test]
fn healthcheck_says_why_it_failed() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = turnstile();
    c.args(["healthcheck", "--port", &port.to_string()]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!(
            "turnstile healthcheck: cannot connect to 127.0.0.1:{port}"
        )),
        "{}",
        text(&o)
    );
}

/// Starts the binary with `args` and reads its log until a line passes
/// `wanted` (at most 10 s), then stops it: that line, or every line seen.
fn log_line(args: &[&str], wanted: impl Fn(&str) -> bool) -> Result<String, Vec<String>> {
    let mut child = turnstile()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let mut found = Err(());
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        if wanted(&line) {
            found = Ok(line);
            break;
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    found.map_err(|()| seen)
}

#[test]
fn an_unprotected_listener_is_warned_about_at_start() {
    let args = [
        "--port",
        "0",
        "--metrics-addr",
        "off",
        "--bind",
        "0.0.0.0",
        "--protected-mode",
        "no",
    ];
    let warned = log_line(&args, |line| {
        line.contains("WARN")
            && line.contains("listening on 0.0.0.0 with protected mode off and no password")
    });
    assert!(warned.is_ok(), "{warned:#?}");
}

/// The start-up log names the status page beside the metrics endpoint: a
/// newcomer finds the page without reading the docs.
#[test]
fn the_status_page_is_announced_at_start() {
    const PAGE: &str = "status page on http://127.0.0.1:";
    let args = ["--port", "0", "--metrics-addr", "127.0.0.1:0"];
    let line =
        log_line(&args, |line| line.contains(PAGE)).unwrap_or_else(|seen| panic!("{seen:#?}"));
    let found = &line[line.find(PAGE).unwrap()..];
    assert!(found.trim_end().ends_with('/'), "{found}");
}

#[test]
fn short_help_is_one_line_an_option_and_long_help_is_grouped() {
    let help = |flag: &str| {
        let mut c = turnstile();
        c.arg(flag);
        let o = run(c);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let (short, long) = (help("-h"), help("--help"));
    assert_ne!(short, long);

    // Every option of `-h` on one line: its flag and its help together.
    let lines: Vec<&str> = short.lines().collect();
    assert!(lines.len() <= 100, "{} lines:\n{short}", lines.len());
    for line in &lines {
        assert!(line.len() <= 120, "{} characters: {line}", line.len());
    }
    let options: Vec<&str> = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("--") || l.trim_start().starts_with("-h"))
        .copied()
        .collect();
    assert!(options.len() > 50, "{short}");
    for line in &options {
        let after_flag = line.trim_start().split_once("  ").map(|(_, h)| h.trim());
        assert!(
            after_flag.is_some_and(|h| !h.is_empty()),
            "no help on the option's line: {line}"
        );
    }

    // `--help`: each heading, and each long option under exactly one.
    let headings = [
        "Server",
        "Security",
        "TLS",
        "Clients and memory",
        "Persistence",
        "Replication",
        "Cluster",
        "Policies",
        "Scripts",
        "Envoy rate limit service",
        "Metrics and logs",
    ];
    let mut section = None;
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for line in long.lines() {
        if let Some(h) = line.strip_suffix(':').filter(|h| !h.starts_with(' ')) {
            section = Some(h.to_string());
            continue;
        }
        let Some(flag) = line.strip_prefix("      --") else {
            continue;
        };
        let flag = flag.split([' ', '=']).next().unwrap().to_string();
        if ["help", "version"].contains(&flag.as_str()) {
            continue;
        }
        let heading = section.clone().unwrap_or_default();
        seen.entry(flag).or_default().push(heading);
    }
    for h in headings {
        assert!(
            long.contains(&format!("\n{h}:\n")),
            "no heading {h}:\n{long}"
        );
    }
    assert!(seen.len() >= 60, "{} options in --help", seen.len());
    for (flag, under) in &seen {
        assert!(
            under.len() == 1 && headings.contains(&under[0].as_str()),
            "--{flag} is under {under:?}"
        );
    }
    // Every option `-h` lists is in `--help`, and the other way round but
    // for those the settings table keeps to `--help` (announce addresses,
    // the older static cluster mode).
    let short_flags: std::collections::BTreeSet<String> = options
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|f| f.split(' ').next().unwrap().to_string())
        .filter(|f| !["help", "version"].contains(&f.as_str()))
        .collect();
    let long_only: std::collections::BTreeSet<String> = turnstile::config::SETTINGS
        .iter()
        .filter(|s| s.is(turnstile::config::table::LONG_HELP_ONLY))
        .map(|s| s.name.to_string())
        .collect();
    assert!(!long_only.is_empty());
    assert_eq!(
        short_flags,
        seen.keys()
            .filter(|f| !long_only.contains(*f))
            .cloned()
            .collect(),
        "-h and --help list different options"
    );
    // `--help` keeps the details and names each variable; `-h` does not.
    assert!(long.contains("[env: TURNSTILE_REPL_TIMEOUT="), "{long}");
    assert!(!short.contains("[env: "), "{short}");
    assert!(
        long.contains("16mb holds about 160,000 decisions"),
        "{long}"
    );
}
