//! ACL selectors (`(...)` rules) through real sockets: a user allowed a
//! command on some keys by one selector and another command on other keys
//! by another may run each only on its own keys; the selectors survive
//! `ACL SAVE`, `ACL LOAD` and a restart; hostile selector rules get a
//! clear error and change nothing. Every reply's bytes are compared with
//! Redis 7.0 in `tests/compat/diff_cases/acl.txt`.

use crate::common::{connect_url, q, q_err, Server};

const KEYS: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";

fn run(c: &str) -> String {
    format!("NOPERM this user has no permissions to run the '{c}' command")
}

/// A limiter gateway that decides on `tenant:*` keys and may only read
/// the policies it runs under (`policy:*`), each right by its own
/// selector: reading a tenant's key or deciding on a policy key is
/// refused.
const GATEWAY: &[&str] = &[
    "ACL",
    "SETUSER",
    "gw",
    "on",
    ">secret",
    "(~tenant:*",
    "+@ratelimit",
    "-@dangerous)",
    "(%R~policy:*",
    "+get)",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_selector_allows_its_commands_on_its_keys_only() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let ok: String = q(&mut admin, GATEWAY).await;
    assert_eq!(ok, "OK");
    let _: () = q(&mut admin, &["SET", "policy:a", "10/60"]).await;
    let mut gw = connect_url(&srv.url("gw:secret@", "")).await.unwrap();

    let decided: Vec<i64> = q(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    assert_eq!(decided[0], 1);
    let policy: String = q(&mut gw, &["GET", "policy:a"]).await;
    assert_eq!(policy, "10/60");
    // The command of one selector on the keys of the other.
    assert_eq!(q_err(&mut gw, &["GET", "tenant:a"]).await, KEYS);
    assert_eq!(
        q_err(&mut gw, &["RL.ALLOW", "policy:a", "10", "60"]).await,
        KEYS
    );
    assert_eq!(q_err(&mut gw, &["SET", "policy:a", "x"]).await, run("set"));
    assert_eq!(
        q_err(&mut gw, &["RL.RESET", "tenant:a"]).await,
        run("rl.reset")
    );
    // One request is judged by one selector whole: keys of both are not
    // allowed together.
    let many = [
        "RL.ALLOWMANY",
        "LIMIT",
        "tenant:a",
        "10",
        "60",
        "LIMIT",
        "policy:a",
        "10",
        "60",
    ];
    assert_eq!(q_err(&mut gw, &many).await, KEYS);

    // ACL LOG names the key, as Redis picks it.
    let log: Vec<redis::Value> = q(&mut admin, &["ACL", "LOG", "1"]).await;
    let text = format!("{log:?}");
    assert!(text.contains("policy:a"), "{text}");

    // clearselectors takes every right away; the root selector stays.
    let _: String = q(
        &mut admin,
        &["ACL", "SETUSER", "gw", "clearselectors", "+ping"],
    )
    .await;
    assert_eq!(
        q_err(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await,
        run("rl.allow")
    );
    let pong: String = q(&mut gw, &["PING"]).await;
    assert_eq!(pong, "PONG");
    let exists: i64 = q(&mut admin, &["EXISTS", "tenant:policy"]).await;
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getuser_shows_each_selector_in_resp2_and_resp3() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    for mut c in [srv.client().await, srv.client3().await] {
        let got: redis::Value = q(&mut c, &["ACL", "GETUSER", "gw"]).await;
        let text = format!("{got:?}");
        // Two selectors, each with its commands, keys and channels.
        assert_eq!(text.matches("\"commands\"").count(), 3, "{text}");
        assert!(text.contains("%R~policy:*"), "{text}");
        assert!(text.contains("~tenant:*"), "{text}");
    }
    let list: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert!(
        list[1].ends_with(
            "resetchannels -@all (~tenant:* resetchannels -@all +@ratelimit \
             -rl.policy|reload -rl.reset -rl.top) (%R~policy:* resetchannels -@all +get)"
        ),
        "{list:?}"
    );
    let dry: String = q(&mut admin, &["ACL", "DRYRUN", "gw", "GET", "policy:a"]).await;
    assert_eq!(dry, "OK");
    let dry: String = q(&mut admin, &["ACL", "DRYRUN", "gw", "GET", "tenant:a"]).await;
    assert_eq!(
        dry,
        "This user has no permissions to access the 'tenant:a' key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_survive_acl_save_load_and_a_restart() {
    let path =
        std::env::temp_dir().join(format!("turnstile-it-acl-sel-{}.acl", std::process::id()));
    std::fs::write(&path, "user old on nopass (~x +get) ( +set ~y )\n").unwrap();
    let p = path.clone();
    let srv = Server::start_with(move |c| c.aclfile = Some(p)).await;
    let mut admin = srv.client().await;
    let list: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert!(
        list[1].ends_with("(~y resetchannels -@all +set)"),
        "{list:?}"
    );
    let _: String = q(&mut admin, GATEWAY).await;
    let saved: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    let ok: String = q(&mut admin, &["ACL", "SAVE"]).await;
    assert_eq!(ok, "OK");
    let _: String = q(&mut admin, &["ACL", "SETUSER", "gw", "clearselectors"]).await;
    let ok: String = q(&mut admin, &["ACL", "LOAD"]).await;
    assert_eq!(ok, "OK");
    let loaded: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(loaded, saved);
    // A file whose selector never closes changes nothing (Redis 7.0.15
    // crashes on it).
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, "user gw on (~x +get\n").unwrap();
    let err = q_err(&mut admin, &["ACL", "LOAD"]).await;
    assert!(
        err.contains(":1: Unmatched parenthesis in selector definition."),
        "{err}"
    );
    let after: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(after, saved);
    std::fs::write(&path, good).unwrap();
    srv.shutdown().await;

    let p = path.clone();
    let again = Server::start_with(move |c| c.aclfile = Some(p)).await;
    let mut admin = again.client().await;
    let restarted: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(restarted, saved);
    let mut gw = connect_url(&again.url("gw:secret@", "")).await.unwrap();
    let decided: Vec<i64> = q(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    assert_eq!(decided[0], 1);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_selectors_get_a_clear_error_and_change_nothing() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    let before: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    for (rules, error) in [
        (
            &["(+get", "~x"][..],
            "Unmatched parenthesis in acl selector starting at '(+get'.",
        ),
        (
            &["("],
            "Unmatched parenthesis in acl selector starting at '('.",
        ),
        (&["(~a\r\nuser root on nopass +@all)"], "Syntax error"),
        (&["(+select|0\nx)"], "Syntax error"),
        (&["(~a\0b)"], "Syntax error"),
        (&["(\"unclosed +get)"], "Syntax error"),
        (&["((+get))"], "Syntax error"),
        (
            &["(~a) +get)"],
            "ACL LIST and ACL SAVE could not print it back",
        ),
        (&["(on >pw)"], "Syntax error"),
    ] {
        let mut args = vec!["ACL", "SETUSER", "gw"];
        args.extend_from_slice(rules);
        let err = q_err(&mut admin, &args).await;
        assert!(err.ends_with(error), "{rules:?}: {err}");
    }
    // A selector of 10,000 rules is taken and printed back whole.
    let mut big = String::from("(");
    for i in 0..10_000 {
        big.push_str(&format!("~k{i}:* "));
    }
    big.push_str("+get)");
    let ok: String = q(&mut admin, &["ACL", "SETUSER", "big", "on", "nopass", &big]).await;
    assert_eq!(ok, "OK");
    let mut b = connect_url(&srv.url("big:x@", "")).await.unwrap();
    let none: Option<String> = q(&mut b, &["GET", "k9999:1"]).await;
    assert_eq!(none, None);
    assert_eq!(q_err(&mut b, &["GET", "k10000:1"]).await, KEYS);
    // More selectors than a user may have: refused whole.
    let mut args = vec!["ACL", "SETUSER", "gw"];
    args.extend(std::iter::repeat_n("()", turnstile::acl::MAX_SELECTORS + 1));
    let err = q_err(&mut admin, &args).await;
    assert!(
        err.ends_with("A user can have at most 1024 selectors"),
        "{err}"
    );
    let _: i64 = q(&mut admin, &["ACL", "DELUSER", "big"]).await;
    let after: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(after, before);
}
