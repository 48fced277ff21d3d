//! Policy files: envoyproxy/ratelimit's own configuration fixtures
//! (`tests/policies/envoy/`, copied unchanged) read and matched as its
//! `config_test.go` expects, Turnstile's added fields, and reloads that
//! keep what did not change.

use std::path::{Path, PathBuf};

use turnstile::limiter::Algorithm;
use turnstile::policy::{self, Action, PolicySet, Unit};

/// `--policies-max-file-size`'s default.
const CAP: u64 = 4 << 20;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/policies/envoy")
        .join(name)
}

fn load(name: &str) -> PolicySet {
    policy::load(&fixture(name), &PolicySet::default(), 1_000, CAP)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn load_err(name: &str) -> String {
    policy::load(&fixture(name), &PolicySet::default(), 1_000, CAP)
        .expect_err(name)
        .to_string()
}

/// The policy a descriptor resolves to: (requests per unit, unit, name),
/// and its counter key.
fn get(
    set: &PolicySet,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<(u32, Option<Unit>, String, String)> {
    let entries: Vec<(&[u8], &[u8])> = entries
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .collect();
    let mut key = Vec::new();
    let m = set.resolve(domain.as_bytes(), &entries, &mut key)?;
    let p = m.policy;
    Some((
        p.def.requests_per_unit,
        p.def.unit,
        p.name.clone(),
        String::from_utf8(key).unwrap(),
    ))
}

fn limit_of(
    set: &PolicySet,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<(u32, Option<Unit>)> {
    get(set, domain, entries).map(|(n, u, _, _)| (n, u))
}

#[test]
fn basic_config_matches_as_envoy_ratelimit_does() {
    let set = load("basic_config.yaml");
    let d = "test-domain";
    assert!(get(&set, "foo_domain", &[]).is_none());
    assert!(get(&set, d, &[]).is_none());
    assert!(get(&set, d, &[("key1", "something")]).is_none());
    // A level with no limit of its own.
    assert!(get(&set, d, &[("key1", "value1")]).is_none());
    // More entries than the config's depth: no limit.
    assert!(get(&set, d, &[("key2", "value2"), ("subkey", "subvalue")]).is_none());
    assert!(get(&set, d, &[("key5", "value5"), ("subkey5", "subvalue")]).is_none());
    assert_eq!(
        limit_of(&set, d, &[("key1", "value1"), ("subkey1", "something")]),
        Some((5, Some(Unit::Second)))
    );
    assert_eq!(
        limit_of(&set, d, &[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((10, Some(Unit::Second)))
    );
    assert_eq!(
        limit_of(&set, d, &[("key2", "something")]),
        Some((20, Some(Unit::Minute)))
    );
    assert_eq!(
        limit_of(&set, d, &[("key2", "value2")]),
        Some((30, Some(Unit::Minute)))
    );
    // A value listed with no rate_limit: let through.
    assert!(get(&set, d, &[("key2", "value3")]).is_none());
    let (_, unit, name, _) = get(&set, d, &[("key3", "foo")]).unwrap();
    assert_eq!(
        (unit, name.as_str()),
        (Some(Unit::Hour), "test-domain.key3")
    );
    let (_, unit, name, _) = get(&set, d, &[("key4", "foo")]).unwrap();
    assert_eq!((unit, name.as_str()), (Some(Unit::Day), "key4_rate_limit"));
    let key6 = set.get("test-domain.key6").unwrap();
    assert_eq!(key6.def.action, Action::Unlimited);
    assert_eq!(
        limit_of(&set, d, &[("key7", "unspecified_value")]),
        Some((70, Some(Unit::Minute)))
    );
    assert_eq!(
        limit_of(&set, d, &[("key7", "another_value")]),
        Some((70, Some(Unit::Minute)))
    );
    // envoyproxy/ratelimit's default: fixed windows of the unit.
    match set.get("key4_rate_limit").unwrap().def.action {
        Action::Limit(spec) => {
            assert_eq!(spec.algo, Algorithm::Fixed);
            assert_eq!(spec.params.period(), 86_400_000_000_000);
            assert_eq!(spec.params.limit(), 1);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_descriptor_without_value_counts_each_value_apart() {
    let set = load("basic_config.yaml");
    let a = get(&set, "test-domain", &[("key2", "a")]).unwrap().3;
    let b = get(&set, "test-domain", &[("key2", "b")]).unwrap().3;
    assert_eq!(a, "rl:{test-domain}.key2_a");
    assert_eq!(b, "rl:{test-domain}.key2_b");
    let nested = get(&set, "test-domain", &[("key1", "value1"), ("subkey1", "x")])
        .unwrap()
        .3;
    assert_eq!(nested, "rl:{test-domain}.key1_value1.subkey1_x");
}

#[test]
fn wildcards_match_as_envoy_ratelimit_does() {
    let set = load("wildcard.yaml");
    let d = "test-domain";
    let hit = |e: &[(&str, &str)]| get(&set, d, e).is_some();
    assert!(hit(&[("noVal", "foo1")]) && hit(&[("noVal", "foo2")]));
    assert!(hit(&[("wild", "foo1")]) && hit(&[("wild", "foo2")]));
    assert!(hit(&[("nestedWild", "val1"), ("wild", "goo2")]));
    assert!(!hit(&[("wild", "bar")]));
    assert!(!hit(&[("noWild", "foo1")]));
    assert!(hit(&[("midWild", "barab")]) && hit(&[("midWild", "bar123b")]));
    assert!(hit(&[("midWild", "barb")]), "* matches the empty string");
    assert!(!hit(&[("midWild", "bara")]) && !hit(&[("midWild", "xbarb")]));
    assert!(hit(&[("multiWild", "foo123bar456baz")]) && hit(&[("multiWild", "foobarbaz")]));
    assert!(!hit(&[("multiWild", "foo123baz")]) && !hit(&[("multiWild", "bar456baz")]));
    // Without share_threshold, each value matched by a wildcard counts
    // apart.
    assert_eq!(
        get(&set, d, &[("wild", "foo1")]).unwrap().3,
        "rl:{test-domain}.wild_foo1"
    );
}

#[test]
fn share_threshold_shares_one_counter_per_wildcard() {
    let set = load("share_threshold.yaml");
    let d = "test-domain";
    let a = get(&set, d, &[("files", "files/a.txt")]).unwrap();
    let b = get(&set, d, &[("files", "files/b.txt")]).unwrap();
    assert_eq!(a.0, 100);
    assert_eq!(a.3, "rl:{test-domain}.files_files/*");
    assert_eq!(a.3, b.3);
    let nested = get(&set, d, &[("nested", "parent"), ("files", "nested/x")]).unwrap();
    assert_eq!(nested.0, 200);
    assert_eq!(nested.3, "rl:{test-domain}.nested_parent.files_nested/*");
}

#[test]
fn shadow_mode_is_per_descriptor() {
    let set = load("shadowmode_config.yaml");
    let shadow = |name: &str| set.get(name).unwrap().def.shadow;
    assert!(shadow("test-domain.key1_value1.subkey1_subvalue1"));
    assert!(!shadow("test-domain.key1_value1.subkey1"));
    assert!(shadow("test-domain.key2"));
    assert!(!shadow("test-domain.key2_value2"));
}

#[test]
fn bad_files_are_refused_with_path_line_and_reason() {
    for (file, reason, line) in [
        // At the unit's own line, with the units there are.
        (
            "bad_limit_unit.yaml",
            "invalid rate limit unit 'foo': use one of second, minute, hour, day, week, month, year",
            Some(6),
        ),
        ("bad_yaml.yaml", "found unexpected end of stream", Some(2)),
        (
            "duplicate_key.yaml",
            "duplicate descriptor composite key 'key1_value1'",
            None,
        ),
        (
            "empty_domain.yaml",
            "config file cannot have empty domain",
            None,
        ),
        ("empty_key.yaml", "descriptor has empty key", Some(3)),
        ("misspelled_key.yaml", "unknown field `ratelimit`", Some(5)),
        (
            "misspelled_key2.yaml",
            "unknown field `requestsperunit`",
            Some(7),
        ),
        (
            "non_map_list.yaml",
            "invalid type: string \"a\", expected a descriptor mapping",
            Some(3),
        ),
        ("non_string_key.yaml", "unknown field `0.25`", Some(1)),
        (
            "replaces_empty.yaml",
            "should not have an empty replaces entry",
            Some(6),
        ),
        (
            "replaces_self.yaml",
            "replaces should not contain name of same descriptor",
            Some(6),
        ),
        (
            "unlimited_with_unit.yaml",
            "should not specify rate limit unit when unlimited",
            Some(3),
        ),
    ] {
        let err = load_err(file);
        let path = fixture(file).display().to_string();
        assert!(err.starts_with(&path), "{file}: {err}");
        assert!(err.contains(reason), "{file}: {err}");
        if let Some(line) = line {
            assert!(err.starts_with(&format!("{path}:{line}:")), "{file}: {err}");
        }
    }
}

#[test]
fn two_files_with_one_domain_are_refused() {
    let dir = tempdir("dup-domain");
    for name in ["merge_domain_key1.yaml", "merge_domain_key2.yaml"] {
        std::fs::copy(fixture(name), dir.join(name)).unwrap();
    }
    let err = policy::load(&dir, &PolicySet::default(), 0, CAP)
        .unwrap_err()
        .to_string();
    assert!(err.contains("duplicate domain 'test-domain'"), "{err}");
}

/// What a newcomer gets wrong in a policy file, each refused with words
/// that name the fix, at the line that needs it.
#[test]
fn a_tab_a_plural_unit_and_an_ambiguous_period_are_named() {
    let dir = tempdir("first-hour");
    let cases = [
        (
            "domain: api\ndescriptors:\n\t- key: user\n",
            "p.yaml:3:1: a tab: YAML indents with spaces, never tabs",
        ),
        (
            "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      requests_per_unit: 10\n      unit: minutes\n",
            "p.yaml:6:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'minutes': use one of second, minute, hour, day, week, month, year",
        ),
        (
            "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      requests_per_unit: 10\n      period: 1M\n",
            "period '1M' is ambiguous: write 1m for minutes or 1mo for a calendar month",
        ),
        (
            "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      requests_per_unit: 10\n      period: 1m\n      block: 2M\n",
            "block '2M' is ambiguous: write 2m for minutes (M alone could mean months)",
        ),
    ];
    for (text, want) in cases {
        let file = dir.join("p.yaml");
        std::fs::write(&file, text).unwrap();
        let err = policy::load(&file, &PolicySet::default(), 1_000, CAP)
            .expect_err(text)
            .to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
}

fn tempdir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("turnstile-policies-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn turnstile_fields_choose_the_algorithm() {
    let text = r#"
domain: api
descriptors:
  - key: user
    rate_limit: {requests_per_unit: 100, period: 10s, algorithm: window}
  - key: ip
    rate_limit: {requests_per_unit: 10, unit: second, algorithm: gcra, burst: 20}
  - key: login
    rate_limit: {requests_per_unit: 5, period: 15m, algorithm: log, precision: 1s, name: logins}
  - key: blocked
    rate_limit: {requests_per_unit: 0, unit: minute}
"#;
    let set = policy::from_texts(&[("api.yaml", text)], &PolicySet::default(), 0).unwrap();
    let spec = |name: &str| match set.get(name).unwrap().def.action {
        Action::Limit(s) => s,
        other => panic!("{other:?}"),
    };
    let user = spec("api.user");
    assert_eq!(
        (user.algo, user.params.period()),
        (Algorithm::Window, 10_000_000_000)
    );
    assert_eq!(set.get("api.user").unwrap().def.unit, None);
    let ip = spec("api.ip");
    assert_eq!((ip.algo, ip.params.burst.get()), (Algorithm::Gcra, 20));
    let login = spec("logins");
    assert_eq!(
        (login.algo, login.params.precision.get()),
        (Algorithm::Log, 1_000_000_000)
    );
    assert_eq!(set.get("api.blocked").unwrap().def.action, Action::DenyAll);

    for (bad, reason) in [
        (
            "{requests_per_unit: 5, unit: second, period: 1s}",
            "give unit or period, not both",
        ),
        (
            "{requests_per_unit: 5, unit: second, burst: 2}",
            "burst is only valid with algorithm gcra",
        ),
        (
            "{requests_per_unit: 5, period: 1s, algorithm: nope}",
            "unknown algorithm 'nope'",
        ),
        ("{requests_per_unit: 5, period: 1x}", "invalid period '1x'"),
        (
            "{requests_per_unit: 5, period: 1s, algorithm: log, precision: 2s}",
            "precision must not exceed the period",
        ),
        (
            "{requests_per_unit: 1000000000, period: 6d, algorithm: log}",
            "over the cap",
        ),
        (
            "{unlimited: true, algorithm: gcra}",
            "an unlimited rate_limit takes no algorithm",
        ),
    ] {
        let text = format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {bad}\n");
        let err = policy::from_texts(&[("f.yaml", &text)], &PolicySet::default(), 0)
            .unwrap_err()
            .to_string();
        // Placed at the descriptor, with its path.
        assert!(
            err.starts_with("f.yaml:3:5: descriptors[0]: "),
            "{bad}: {err}"
        );
        assert!(err.contains(reason), "{bad}: {err}");
    }
    let dup = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1, unit: second, name: n}\n  - key: b\n    rate_limit: {requests_per_unit: 1, unit: second, name: n}\n";
    let err = policy::from_texts(&[("f.yaml", dup)], &PolicySet::default(), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("rate limit name 'n' is used by both"), "{err}");
    let braces = "domain: 'a{b}'\ndescriptors: []\n";
    let err = policy::from_texts(&[("f.yaml", braces)], &PolicySet::default(), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("must not contain"), "{err}");
}

#[test]
fn a_reload_keeps_since_and_stats_of_what_did_not_change() {
    let v1 = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5, unit: second}\n  - key: b\n    rate_limit: {requests_per_unit: 5, unit: second}\n";
    let v2 = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5, unit: second}\n  - key: b\n    rate_limit: {requests_per_unit: 7, unit: second}\n";
    let first = policy::from_texts(&[("f.yaml", v1)], &PolicySet::default(), 100).unwrap();
    first
        .get("d.a")
        .unwrap()
        .stats
        .record(3, false, false, 3, 5);
    first.get("d.b").unwrap().stats.record(1, true, false, 5, 5);
    let second = policy::from_texts(&[("f.yaml", v2)], &first, 200).unwrap();
    let (a, b) = (second.get("d.a").unwrap(), second.get("d.b").unwrap());
    assert_eq!(a.since_ms, 100, "unchanged");
    assert_eq!(b.since_ms, 200, "changed");
    assert_eq!(a.stats.read()[0], 3);
    assert_eq!(
        b.stats.read()[1],
        1,
        "a changed limit keeps its stats' series"
    );
}

#[test]
fn near_limit_counts_hits_past_eighty_percent() {
    let s = policy::PolicyStats::default();
    // Limit 10: near threshold 8. Used 7, 8: not near; 9, 10: near.
    for used in 7..=10 {
        s.record(1, false, false, used, 10);
    }
    s.record(1, true, true, 10, 10);
    assert_eq!(s.read(), [5, 1, 2, 4, 1]);
}

/// `n` descriptors with a limit each, one a line (about 60 bytes each),
/// the last a copy of descriptor `dup` if given.
fn many_descriptors(n: usize, dup: Option<usize>) -> String {
    use std::fmt::Write;
    let mut text = String::from("domain: big\ndescriptors:\n");
    for i in 0..n {
        let v = match dup {
            Some(d) if i == n - 1 => d,
            _ => i,
        };
        writeln!(
            text,
            "  - {{key: k, value: v{v}, rate_limit: {{unit: second, requests_per_unit: 5}}}}"
        )
        .unwrap();
    }
    text
}

/// Loads `text` as file `name` on its own thread; a load that has not
/// finished in two minutes fails the test instead of hanging it (the
/// quadratic check took hours here for 200,000 descriptors).
fn load_text_bounded(name: &str, text: &str) -> Result<PolicySet, String> {
    let dir = tempdir(name);
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = policy::load(&path, &PolicySet::default(), 0, 64 << 20);
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    rx.recv_timeout(std::time::Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("{name}: not loaded within two minutes"))
}

/// Duplicates are found by hashing each level's keys, not by comparing
/// every pair: 200,000 descriptors load, and a duplicate among them is
/// still named. (Times on the release build are in docs/reliability.md.)
#[test]
fn two_hundred_thousand_descriptors_load_and_a_duplicate_is_named() {
    let set = load_text_bounded("many", &many_descriptors(200_000, None)).unwrap();
    assert_eq!(set.len(), 200_000);
    let mut key = Vec::new();
    let found = set.resolve(b"big", &[(b"k", b"v199999")], &mut key);
    assert_eq!(found.map(|m| m.policy.name.as_str()), Some("big.k_v199999"));
    let err = load_text_bounded("many-dup", &many_descriptors(200_000, Some(150_000))).unwrap_err();
    assert!(
        err.contains("duplicate descriptor composite key 'k_v150000'"),
        "{err}"
    );
    // Same key, one with a value and one without: not duplicates.
    let text = "domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: x\n  - key: b\n";
    assert!(policy::from_texts(&[("f.yaml", text)], &PolicySet::default(), 0).is_ok());
    let text = "domain: d\ndescriptors:\n  - key: a\n  - key: b\n  - key: a\n";
    let err = policy::from_texts(&[("f.yaml", text)], &PolicySet::default(), 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("duplicate descriptor composite key 'a'"),
        "{err}"
    );
}

/// A file over `--policies-max-file-size` is refused, naming its size and
/// the cap, and is not read past the cap.
#[test]
fn a_file_over_the_cap_is_refused_naming_sizes() {
    let dir = tempdir("cap");
    let path = dir.join("big.yaml");
    let text = many_descriptors(100, None);
    std::fs::write(&path, &text).unwrap();
    let size = text.len() as u64;
    let err = policy::load(&path, &PolicySet::default(), 0, 1024)
        .unwrap_err()
        .to_string();
    let human = format!("{:.2}K", size as f64 / 1024.0);
    assert!(
        err.contains(&format!(
            "policy file big.yaml is {human}, over the cap of 1.00K (--policies-max-file-size)"
        )),
        "{err}"
    );
    assert!(err.starts_with(&path.display().to_string()), "{err}");
    // At the cap exactly, it loads.
    assert_eq!(
        policy::load(&path, &PolicySet::default(), 0, size)
            .unwrap()
            .len(),
        100
    );
    // A path with no end (a device) is refused at the cap, not read
    // for ever.
    let err = policy::load(Path::new("/dev/zero"), &PolicySet::default(), 0, 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(err.contains("over the cap of 1.00M"), "{err}");
}

/// Nesting past 64 levels is refused before the YAML parser sees it
/// (libyaml's scanner is quadratic in flow depth: 80 KB of `[` took 3.6 s),
/// flow or block, with where it happens; quoted brackets and comments do
/// not count, and real files nest well within.
#[test]
fn deep_nesting_is_refused_before_parsing() {
    let deep = [
        ("flow", "[".repeat(80_000), 1),
        (
            "flow-map",
            format!("domain: d\ndescriptors: {}", "{a: ".repeat(40_000)),
            2,
        ),
        ("block-dashes", format!("{}x\n", "- ".repeat(40_000)), 1),
        (
            "block-indent",
            (0..100)
                .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
                .collect::<String>(),
            65,
        ),
    ];
    for (name, text, line) in deep {
        let err = policy::from_texts(&[("n.yaml", &text)], &PolicySet::default(), 0).unwrap_err();
        assert_eq!(err.reason, "nested deeper than 64 levels", "{name}");
        assert_eq!(err.line, Some(line), "{name}");
    }
    // Descriptors nested 30 deep (61 YAML levels with the root) load.
    let nested = |levels: usize| {
        let mut text = String::from("domain: d\ndescriptors:\n");
        for i in 0..levels {
            let pad = "  ".repeat(2 * i);
            text += &format!("{pad}- key: k{i}\n{pad}  rate_limit: {{unit: second, requests_per_unit: 1}}\n{pad}  descriptors:\n");
        }
        text += &format!("{}- key: last\n", "  ".repeat(2 * levels));
        text
    };
    let set = policy::from_texts(&[("ok.yaml", &nested(30))], &PolicySet::default(), 0).unwrap();
    assert_eq!(set.len(), 30);
    let err =
        policy::from_texts(&[("deep.yaml", &nested(40))], &PolicySet::default(), 0).unwrap_err();
    assert_eq!(err.reason, "nested deeper than 64 levels");
    // Brackets in quotes, comments and block scalars are text.
    let text = format!(
        "domain: d # {open}\ndescriptors:\n  - key: '{open}'\n    value: \"{open}\\\"\"\n    metadata: |\n      {open}\n",
        open = "[".repeat(200)
    );
    let set = policy::from_texts(&[("q.yaml", &text)], &PolicySet::default(), 0).unwrap();
    assert_eq!(set.domains(), 1);
}
