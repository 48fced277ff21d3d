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

#[test]
fn an_unprotected_listener_is_warned_about_at_start() {
    let mut child = turnstile()
        .args([
            "--port",
            "0",
            "--metrics-addr",
            "off",
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
        ])
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
    let mut warned = false;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        warned = line.contains("WARN")
            && line.contains("listening on 0.0.0.0 with protected mode off and no password");
        seen.push(line);
        if warned {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned, "{seen:#?}");
}

/// The start-up log names the status page beside the metrics endpoint: a
/// newcomer finds the page without reading the docs.
#[test]
fn the_status_page_is_announced_at_start() {
    let mut child = turnstile()
        .args(["--port", "0", "--metrics-addr", "127.0.0.1:0"])
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
    let mut found = None;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        if let Some(at) = line.find("status page on http://127.0.0.1:") {
            found = Some(line[at..].to_string());
            break;
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    let found = found.unwrap_or_else(|| panic!("{seen:#?}"));
    assert!(found.trim_end().ends_with('/'), "{found}");
}
