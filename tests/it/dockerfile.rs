//! What can be checked of the Dockerfile without a Docker engine: every
//! file it copies from the build context exists, the binary it runs is the
//! one Cargo builds, it runs as a fixed non-root user, exposes the right
//! ports, and its healthcheck subcommand works against a running server.

use std::path::Path;
use std::process::Command;

fn dockerfile() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"))
        .expect("Dockerfile at the repository root")
}

/// The instruction lines, with `\` continuations joined.
fn instructions() -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in dockerfile().lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            current.push_str(stripped);
            current.push(' ');
        } else {
            current.push_str(line);
            out.push(std::mem::take(&mut current));
        }
    }
    out
}

#[test]
fn every_copied_path_exists_in_the_context() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ignored = std::fs::read_to_string(root.join(".dockerignore")).unwrap_or_default();
    let mut copies = 0;
    for ins in instructions() {
        let words: Vec<&str> = ins.split_whitespace().collect();
        if words.first() != Some(&"COPY") || words.iter().any(|w| w.starts_with("--from")) {
            continue;
        }
        let sources = &words[1..words.len() - 1];
        for src in sources {
            copies += 1;
            assert!(
                root.join(src).exists(),
                "COPY {src}: no such file in the build context"
            );
            assert!(
                !ignored.lines().any(|l| l.trim() == *src),
                "COPY {src}: excluded by .dockerignore"
            );
        }
    }
    assert!(
        copies >= 3,
        "the Dockerfile copies the manifest, lockfile and sources"
    );
}

#[test]
fn runs_the_binary_cargo_builds_as_a_non_root_user() {
    let text = dockerfile();
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let bin_name = Path::new(env!("CARGO_BIN_EXE_turnstile"))
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(manifest.contains(&format!("name = \"{bin_name}\"")));
    assert!(
        text.contains(&format!("--bin {bin_name}")),
        "builds the {bin_name} binary"
    );
    assert!(text.contains(&format!(
        "/target/release/{bin_name} /usr/local/bin/{bin_name}"
    )));
    assert!(text.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{bin_name}\"]")));
    assert!(text.contains(&format!(
        "CMD [\"/usr/local/bin/{bin_name}\", \"healthcheck\"]"
    )));
    let user = instructions()
        .into_iter()
        .rfind(|i| i.starts_with("USER "))
        .expect("a USER instruction");
    let uid: u32 = user[5..]
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect("a numeric uid");
    assert_ne!(uid, 0, "not root");
    assert!(text.contains("EXPOSE 6379 9898"));
    assert!(text.contains("TURNSTILE_BIND=0.0.0.0"));
    assert!(text.contains("TURNSTILE_METRICS_ADDR=0.0.0.0:9898"));
    assert!(
        !instructions().iter().any(|i| i.contains("PROTECTED_MODE")),
        "the image keeps protected mode on"
    );
    assert!(text.contains("STOPSIGNAL SIGTERM"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_subcommand_reports_the_server() {
    let server = crate::common::Server::start().await;
    let port = server.addr.port().to_string();
    let check = |port: String| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_turnstile"))
                .args(["healthcheck", "--port", &port])
                .env_remove("TURNSTILE_PORT")
                .status()
                .expect("run turnstile healthcheck")
        })
    };
    assert!(
        check(port.clone()).await.unwrap().success(),
        "healthy while serving"
    );
    server.shutdown().await;
    assert!(
        !check(port).await.unwrap().success(),
        "unhealthy once stopped"
    );
}

/// The compose files publish every port on the host's loopback only: they
/// run with protected mode off and no password, which on every interface
/// would let any machine that reaches the host lift every limit.
#[test]
fn compose_files_publish_on_loopback_only() {
    for file in ["docker-compose.yml", "docker-compose.cluster.yml"] {
        let text =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
                .unwrap();
        let mut published = 0;
        for line in text.lines().map(str::trim) {
            let ports: Vec<&str> = if let Some(list) = line.strip_prefix("ports: [") {
                list.trim_end_matches(']')
                    .split(',')
                    .map(|p| p.trim().trim_matches('"'))
                    .collect()
            } else if let Some(p) = line.strip_prefix("- \"") {
                if line.contains(':')
                    && p.trim_end_matches('"')
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit())
                {
                    vec![p.trim_end_matches('"')]
                } else {
                    vec![]
                }
            } else {
                vec![]
            };
            for port in ports {
                published += 1;
                assert!(
                    port.starts_with("127.0.0.1:"),
                    "{file}: {port} is published on every interface"
                );
            }
        }
        assert!(published > 0, "{file}: no published ports found");
    }
}

/// The Sentinel compose files run on the host's network: every server in
/// them must bind the loopback only, for the same reason.
#[test]
fn the_sentinel_compose_files_bind_loopback_only() {
    for (file, binds) in [
        ("docker-compose.replication.yml", 3),
        ("docker-compose.cluster-replicas.yml", 1),
    ] {
        let text =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
                .unwrap();
        let found: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("TURNSTILE_BIND: "))
            .collect();
        assert_eq!(found, vec!["127.0.0.1"; binds], "{file}");
        assert!(
            text.contains("bind 127.0.0.1\\n"),
            "{file}: the Sentinels bind the loopback"
        );
        assert!(
            !text.contains("ports:"),
            "{file}: host networking publishes nothing"
        );
        // Both anchors (servers, Sentinels) put every service on the host.
        let host_mode = text
            .lines()
            .filter(|l| l.trim() == "network_mode: host")
            .count();
        assert_eq!(host_mode, 2, "{file}");
    }
}
