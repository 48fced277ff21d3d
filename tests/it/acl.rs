//! ACL users through real sockets: a gateway credential decides limits on
//! its own keys and nothing else; rules changed by `ACL SETUSER` reach
//! open connections; `ACL DELUSER` closes them; AUTH as a user; and
//! `requirepass` as the default user's password.

use turnstile::cmd::script::native::CATALOGUE;

use crate::common::{connect_url, q, q_err, Server};

const GATEWAY: &[&str] = &[
    "ACL",
    "SETUSER",
    "gw",
    "on",
    ">secret",
    "~tenant:*",
    "+@ratelimit",
    "-@dangerous",
];

async fn gateway(srv: &Server) -> redis::aio::MultiplexedConnection {
    connect_url(&srv.url("gw:secret@", ""))
        .await
        .expect("the gateway authenticates")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_decides_on_its_tenants_keys_and_nothing_else() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let ok: String = q(&mut admin, GATEWAY).await;
    assert_eq!(ok, "OK");
    let mut gw = gateway(&srv).await;

    let decided: Vec<i64> = q(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    assert_eq!(decided[0], 1);
    let throttled: Vec<i64> = q(&mut gw, &["CL.THROTTLE", "tenant:b", "5", "10", "60"]).await;
    assert_eq!(throttled[0], 0);

    let keys = "NOPERM this user has no permissions to access one of the keys used as arguments";
    assert_eq!(
        q_err(&mut gw, &["RL.ALLOW", "other:a", "10", "60"]).await,
        keys
    );
    // Every key of RL.ALLOWMANY is checked, not only the first.
    let many = [
        "RL.ALLOWMANY",
        "LIMIT",
        "tenant:a",
        "10",
        "60",
        "LIMIT",
        "other:a",
        "10",
        "60",
    ];
    assert_eq!(q_err(&mut gw, &many).await, keys);
    let run = |c: &str| format!("NOPERM this user has no permissions to run the '{c}' command");
    assert_eq!(
        q_err(&mut gw, &["CONFIG", "GET", "maxmemory"]).await,
        run("config|get")
    );
    assert_eq!(q_err(&mut gw, &["FLUSHALL"]).await, run("flushall"));
    assert_eq!(
        q_err(&mut gw, &["EVAL", "return 1", "0"]).await,
        run("eval")
    );
    assert_eq!(
        q_err(&mut gw, &["RL.RESET", "tenant:a"]).await,
        run("rl.reset")
    );
    assert_eq!(q_err(&mut gw, &["GET", "tenant:a"]).await, run("get"));
    assert_eq!(
        q_err(&mut gw, &["CLIENT", "INFO"]).await,
        run("client|info")
    );

    // Refused when queued: the transaction is doomed.
    let _: String = q(&mut admin, &["ACL", "SETUSER", "gw", "+multi", "+exec"]).await;
    let ok: String = q(&mut gw, &["MULTI"]).await;
    assert_eq!(ok, "OK");
    assert_eq!(
        q_err(&mut gw, &["RL.ALLOW", "other:b", "10", "60"]).await,
        keys
    );
    assert!(q_err(&mut gw, &["EXEC"]).await.starts_with("EXECABORT"));

    // Nothing the gateway was refused touched the keyspace.
    let exists: i64 = q(&mut admin, &["EXISTS", "other:a", "other:b"]).await;
    assert_eq!(exists, 0);
    let users: Vec<String> = q(&mut admin, &["ACL", "USERS"]).await;
    assert_eq!(users, ["default", "gw"]);
    let list: String = q(&mut admin, &["CLIENT", "LIST"]).await;
    assert!(list.lines().any(|l| l.contains(" user=gw ")), "{list}");
    assert!(list.lines().any(|l| l.contains(" user=default ")), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_changed_by_setuser_reach_open_connections() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    let mut gw = gateway(&srv).await;
    let decided: Vec<i64> = q(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    assert_eq!(decided[0], 1);

    let _: String = q(&mut admin, &["ACL", "SETUSER", "gw", "-rl.allow"]).await;
    assert_eq!(
        q_err(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await,
        "NOPERM this user has no permissions to run the 'rl.allow' command"
    );
    let _: String = q(
        &mut admin,
        &["ACL", "SETUSER", "gw", "+rl.allow", "resetkeys", "~other:*"],
    )
    .await;
    let decided: Vec<i64> = q(&mut gw, &["RL.ALLOW", "other:a", "10", "60"]).await;
    assert_eq!(decided[0], 1);

    // Queued while allowed, refused at EXEC: the rules are checked again.
    let _: String = q(&mut admin, &["ACL", "SETUSER", "gw", "+@transaction"]).await;
    let mut raw = srv.raw().await;
    assert_eq!(raw.call(&["AUTH", "gw", "secret"]).await, "+OK\r\n");
    assert_eq!(raw.call(&["MULTI"]).await, "+OK\r\n");
    let queued = raw.call(&["RL.ALLOW", "other:a", "10", "60"]).await;
    assert_eq!(queued, "+QUEUED\r\n");
    let _: String = q(&mut admin, &["ACL", "SETUSER", "gw", "resetkeys"]).await;
    assert_eq!(
        raw.call(&["EXEC"]).await,
        "*1\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to touch the specified keys\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_user_closes_its_connections() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    let mut raw = srv.raw().await;
    assert_eq!(raw.call(&["AUTH", "gw", "secret"]).await, "+OK\r\n");
    let deleted: i64 = q(&mut admin, &["ACL", "DELUSER", "gw", "nobody"]).await;
    assert_eq!(deleted, 1);
    assert!(raw.read_until_closed().await.is_empty());
    assert_eq!(
        q_err(&mut admin, &["ACL", "DELUSER", "default"]).await,
        "ERR The 'default' user cannot be removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_takes_only_an_enabled_users_password() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    let wrong = "WRONGPASS invalid username-password pair or user is disabled.";
    let mut c = srv.client().await;
    assert_eq!(q_err(&mut c, &["AUTH", "gw", "Secret"]).await, wrong);
    assert_eq!(q_err(&mut c, &["AUTH", "nobody", "secret"]).await, wrong);
    // Still the default user after the failures.
    let who: String = q(&mut c, &["ACL", "WHOAMI"]).await;
    assert_eq!(who, "default");
    let ok: String = q(&mut c, &["AUTH", "gw", "secret"]).await;
    assert_eq!(ok, "OK");
    assert!(q_err(&mut c, &["ACL", "WHOAMI"])
        .await
        .starts_with("NOPERM"));
    // RESET is the default user again.
    let reset: String = q(&mut c, &["RESET"]).await;
    assert_eq!(reset, "RESET");
    let who: String = q(&mut c, &["ACL", "WHOAMI"]).await;
    assert_eq!(who, "default");
    let _: String = q(&mut admin, &["ACL", "SETUSER", "gw", "off"]).await;
    assert_eq!(q_err(&mut c, &["AUTH", "gw", "secret"]).await, wrong);
    let _: String = q(&mut admin, &["ACL", "SETUSER", "gw", "on"]).await;
    // HELLO 3 AUTH (the crate sends it for a RESP3 URL with a user).
    let mut gw3 = connect_url(&srv.url("gw:secret@", "protocol=resp3"))
        .await
        .expect("HELLO 3 AUTH gw secret");
    let decided: Vec<i64> = q(&mut gw3, &["RL.ALLOW", "tenant:z", "10", "60"]).await;
    assert_eq!(decided[0], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass_is_the_default_users_password() {
    let srv = Server::start_with(|c| c.requirepass = Some("pw".into())).await;
    let mut c = srv.client().await;
    assert!(q_err(&mut c, &["PING"]).await.starts_with("NOAUTH"));
    let ok: String = q(&mut c, &["AUTH", "pw"]).await;
    assert_eq!(ok, "OK");
    let list: Vec<String> = q(&mut c, &["ACL", "LIST"]).await;
    // SHA-256 of "pw", never the password itself.
    assert_eq!(
        list,
        ["user default on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~* &* +@all"]
    );
    let _: String = q(&mut c, &["CONFIG", "SET", "requirepass", "new"]).await;
    let mut d = srv.client().await;
    assert!(q_err(&mut d, &["AUTH", "pw"])
        .await
        .starts_with("WRONGPASS"));
    let ok: String = q(&mut d, &["AUTH", "default", "new"]).await;
    assert_eq!(ok, "OK");
    let _: String = q(&mut c, &["CONFIG", "SET", "requirepass", ""]).await;
    let mut e = srv.client().await;
    crate::common::assert_pong(&mut e).await;
    let list: Vec<String> = q(&mut e, &["ACL", "LIST"]).await;
    assert_eq!(list, ["user default on nopass ~* &* +@all"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_call_commands_under_the_users_rules() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(
        &mut admin,
        &[
            "ACL", "SETUSER", "app", "on", ">pw", "~app:*", "&*", "+@all", "-incrby",
        ],
    )
    .await;
    let mut app = connect_url(&srv.url("app:pw@", "")).await.unwrap();
    let err = q_err(
        &mut app,
        &["EVAL", "return redis.call('get', 'other')", "0"],
    )
    .await;
    assert!(
        err.starts_with("ERR The user executing the script can't access at least one of the keys mentioned in the command arguments"),
        "{err}"
    );
    // A catalogued script, which the default user runs natively, runs in
    // Lua for a user with rules: its INCRBY is refused there.
    let fixed = CATALOGUE
        .iter()
        .find(|n| n.name == "limits fixed window")
        .unwrap();
    let err = q_err(&mut app, &["EVAL", fixed.text, "1", "app:a", "60", "2"]).await;
    assert!(
        err.starts_with("ERR The user executing the script can't run this command or subcommand"),
        "{err}"
    );
    let n: i64 = q(&mut admin, &["EVAL", fixed.text, "1", "app:a", "60", "2"]).await;
    assert_eq!(n, 2);
    let _: String = q(&mut admin, &["ACL", "SETUSER", "app", "+incrby"]).await;
    let n: i64 = q(&mut app, &["EVAL", fixed.text, "1", "app:a", "60", "2"]).await;
    assert_eq!(n, 4);
    assert!(
        q_err(&mut app, &["EVAL", fixed.text, "1", "other", "60", "2"])
            .await
            .starts_with("NOPERM")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_channels_away_closes_the_users_subscribers() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let rules = [
        "ACL",
        "SETUSER",
        "sub",
        "on",
        "nopass",
        "resetchannels",
        "&news.*",
        "&sports",
        "+@all",
    ];
    let _: String = q(&mut admin, &rules).await;
    let mut news = srv.raw().await;
    assert_eq!(news.call(&["AUTH", "sub", "x"]).await, "+OK\r\n");
    assert!(news
        .call(&["SUBSCRIBE", "news.today"])
        .await
        .starts_with("*3\r\n"));
    let mut sports = srv.raw().await;
    assert_eq!(sports.call(&["AUTH", "sub", "x"]).await, "+OK\r\n");
    assert!(sports
        .call(&["SUBSCRIBE", "sports"])
        .await
        .starts_with("*3\r\n"));
    // More channels: nobody is closed.
    let _: String = q(&mut admin, &["ACL", "SETUSER", "sub", "&more"]).await;
    assert_eq!(news.call(&["PING"]).await, "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    let _: String = q(
        &mut admin,
        &["ACL", "SETUSER", "sub", "resetchannels", "&sports"],
    )
    .await;
    assert!(news.read_until_closed().await.is_empty());
    assert_eq!(
        sports.call(&["PING"]).await,
        "*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_logged_alike_ones_counted_together() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    let mut gw = gateway(&srv).await;
    for _ in 0..2 {
        let _ = q_err(&mut gw, &["RL.ALLOW", "other:a", "10", "60"]).await;
    }
    let _ = q_err(&mut gw, &["FLUSHALL"]).await;
    let mut c = srv.client().await;
    let _ = q_err(&mut c, &["AUTH", "gw", "nope"]).await;
    let log: Vec<Vec<redis::Value>> = q(&mut admin, &["ACL", "LOG"]).await;
    let fields = |e: &Vec<redis::Value>| -> Vec<String> {
        // count, reason, context, object, username (age and client vary).
        e.iter()
            .skip(1)
            .step_by(2)
            .take(5)
            .map(|v| match v {
                redis::Value::Int(n) => n.to_string(),
                v => crate::common::text(v),
            })
            .collect()
    };
    let got: Vec<Vec<String>> = log.iter().map(fields).collect();
    assert_eq!(
        got,
        [
            ["1", "auth", "toplevel", "AUTH", "gw"],
            ["1", "command", "toplevel", "flushall", "gw"],
            ["2", "key", "toplevel", "other:a", "gw"],
            // The crate's CLIENT SETINFO on connecting (lib-name, lib-ver).
            ["2", "command", "toplevel", "client|setinfo", "gw"],
        ]
    );
    let ok: String = q(&mut admin, &["ACL", "LOG", "RESET"]).await;
    assert_eq!(ok, "OK");
    let log: Vec<redis::Value> = q(&mut admin, &["ACL", "LOG"]).await;
    assert!(log.is_empty());
}

/// `redis.acl_check_cmd` answers for the script's user, as Redis's suite
/// ("Script ACL check") asks it: a command and key it may use, a command
/// it may not, a key outside its patterns, and no command at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_asks_whether_its_user_may_run_a_command() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "bob",
            "on",
            ">123",
            "+@scripting",
            "+set",
            "~x*",
        ],
    )
    .await;
    let mut bob = connect_url(&srv.url("bob:123@", "")).await.unwrap();
    let check = "return redis.acl_check_cmd(unpack(ARGV))";
    let ask = |args: &'static [&'static str]| {
        let mut c = crate::common::cmd(&["EVAL", check, "0"]);
        for a in args {
            c.arg(*a);
        }
        c
    };
    let yes: Option<i64> = ask(&["set", "xx", "1"])
        .query_async(&mut bob)
        .await
        .unwrap();
    assert_eq!(yes, Some(1), "Lua true is 1");
    let no: Option<i64> = ask(&["hset", "xx", "f", "1"])
        .query_async(&mut bob)
        .await
        .unwrap();
    assert_eq!(no, None, "Lua false is nil");
    let no: Option<i64> = ask(&["set", "yy", "1"])
        .query_async(&mut bob)
        .await
        .unwrap();
    assert_eq!(no, None);
    let err = ask(&["invalid-cmd", "arg"])
        .query_async::<redis::Value>(&mut bob)
        .await
        .unwrap_err();
    assert!(
        crate::common::err_text(&err).contains("Invalid command passed to redis.acl_check_cmd()"),
        "{err:?}"
    );
    // The default user may run anything.
    let yes: Option<i64> = ask(&["hset", "yy", "f", "1"])
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(yes, Some(1));
}

/// A path under the temp directory no other test or run uses.
fn temp_acl(tag: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "turnstile-it-acl-{tag}-{}-{}.acl",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

async fn start_with_acl_file(path: &std::path::Path) -> Server {
    let path = path.to_owned();
    Server::start_with(move |c| c.aclfile = Some(path)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_from_the_acl_file_log_in() {
    let path = temp_acl("start");
    std::fs::write(
        &path,
        "user gw on >secret ~tenant:* +@ratelimit\n\n  user reader on >r %R~* +get  \r\n",
    )
    .unwrap();
    let srv = start_with_acl_file(&path).await;
    let mut gw = gateway(&srv).await;
    let decided: Vec<i64> = q(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    assert_eq!(decided[0], 1);
    let mut admin = srv.client().await;
    let list: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(list.len(), 3, "{list:?}");
    assert_eq!(list[0], "user default on nopass ~* &* +@all");
    assert!(list[2].starts_with("user reader on #"), "{list:?}");
    let got: Vec<String> = q(&mut admin, &["CONFIG", "GET", "aclfile"]).await;
    assert_eq!(got, ["aclfile".to_string(), path.display().to_string()]);
    assert!(
        q_err(&mut admin, &["CONFIG", "SET", "aclfile", "/elsewhere"])
            .await
            .contains("can't set immutable config"),
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass_is_the_default_users_unless_the_file_declares_it() {
    let path = temp_acl("requirepass");
    std::fs::write(&path, "user gw on >secret ~tenant:* +@ratelimit\n").unwrap();
    let p = path.clone();
    let srv = Server::start_with(move |c| {
        c.aclfile = Some(p);
        c.requirepass = Some("pw".into());
    })
    .await;
    let mut c = srv.client().await;
    assert!(q_err(&mut c, &["PING"]).await.starts_with("NOAUTH"));
    let ok: String = q(&mut c, &["AUTH", "pw"]).await;
    assert_eq!(ok, "OK");
    // The file's own default user wins at ACL LOAD.
    std::fs::write(&path, "user default on nopass ~* &* +@all\n").unwrap();
    let ok: String = q(&mut c, &["ACL", "LOAD"]).await;
    assert_eq!(ok, "OK");
    let mut d = srv.client().await;
    crate::common::assert_pong(&mut d).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_acl_save_writes_acl_load_and_a_restart_read_back() {
    let path = temp_acl("roundtrip");
    std::fs::write(&path, "").unwrap();
    let srv = start_with_acl_file(&path).await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    let _: String = q(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "mixed",
            "on",
            ">a",
            ">b",
            "%R~r:*",
            "%W~w:*",
            "~*x",
            "&news.*",
            "+@read",
            "-get",
            "+select|0",
            "skip-sanitize-payload",
        ],
    )
    .await;
    let _: String = q(&mut admin, &["ACL", "SETUSER", "idle"]).await;
    let saved: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    let ok: String = q(&mut admin, &["ACL", "SAVE"]).await;
    assert_eq!(ok, "OK");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, saved.join("\n") + "\n");
    assert!(!text.contains("secret") && !text.contains('>'), "{text}");

    // Changes after the save are undone by ACL LOAD.
    let _: String = q(&mut admin, &["ACL", "SETUSER", "mixed", "off", "-@all"]).await;
    let _: String = q(&mut admin, &["ACL", "SETUSER", "extra", "on"]).await;
    let _: i64 = q(&mut admin, &["ACL", "DELUSER", "idle"]).await;
    let ok: String = q(&mut admin, &["ACL", "LOAD"]).await;
    assert_eq!(ok, "OK");
    let loaded: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(loaded, saved);
    let mut gw = gateway(&srv).await;
    let decided: Vec<i64> = q(&mut gw, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    assert_eq!(decided[0], 1);
    srv.shutdown().await;

    let again = start_with_acl_file(&path).await;
    let mut admin = again.client().await;
    let restarted: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(restarted, saved);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_line_makes_acl_load_change_nothing() {
    let path = temp_acl("bad");
    std::fs::write(&path, "user gw on >secret ~tenant:* +@ratelimit\n").unwrap();
    let srv = start_with_acl_file(&path).await;
    let mut admin = srv.client().await;
    let before: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    let shown = path.display();
    for (file, error) in [
        (
            "user gw on nopass\nuser other on +nosuch\n".to_string(),
            format!("ERR {shown}:2: Error in applying operation '+nosuch': Unknown command or category name in ACL. "),
        ),
        (
            "user gw on\nuser gw off\n".into(),
            "ERR WARNING: Duplicate user 'gw' found on line 2. ".into(),
        ),
        (
            "# users\nuser gw on\n".into(),
            format!("ERR {shown}:1 should start with user keyword followed by the username. "),
        ),
        (
            // A CR inside a line: part of a rule (the reply shows it
            // as a space), never the start of a line.
            "user gw on nopass +get\ruser evil on nopass +@all\n".into(),
            format!("ERR {shown}:1: Error in applying operation '+get user': Unknown command or category name in ACL. {shown}:1: Syntax error. "),
        ),
    ] {
        std::fs::write(&path, &file).unwrap();
        assert_eq!(
            q_err(&mut admin, &["ACL", "LOAD"]).await,
            format!("{error}WARNING: ACL errors detected, no change to the previously active ACL rules was performed"),
            "{file:?}"
        );
        let after: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
        assert_eq!(after, before, "{file:?}");
    }
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    assert_eq!(
        q_err(&mut admin, &["ACL", "LOAD"]).await,
        format!("ERR Error loading ACLs, opening file '{shown}': Is a directory")
    );
    assert_eq!(
        q_err(&mut admin, &["ACL", "SAVE"]).await,
        "ERR There was an error trying to save the ACLs. Please check the server logs for more information"
    );
    std::fs::remove_dir(&path).unwrap();
    assert_eq!(
        q_err(&mut admin, &["ACL", "LOAD"]).await,
        format!("ERR Error loading ACLs, opening file '{shown}': No such file or directory")
    );
    let after: Vec<String> = q(&mut admin, &["ACL", "LIST"]).await;
    assert_eq!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_load_closes_the_connections_of_users_it_removed() {
    let path = temp_acl("closes");
    std::fs::write(
        &path,
        "user gw on >secret ~tenant:* +@ratelimit\nuser keep on >k ~* +@all\n",
    )
    .unwrap();
    let srv = start_with_acl_file(&path).await;
    let mut admin = srv.client().await;
    let mut gone = srv.raw().await;
    assert_eq!(gone.call(&["AUTH", "gw", "secret"]).await, "+OK\r\n");
    let mut kept = srv.raw().await;
    assert_eq!(kept.call(&["AUTH", "keep", "k"]).await, "+OK\r\n");
    let mut fresh = srv.raw().await;
    std::fs::write(&path, "user keep on >k ~* -@all +ping\n").unwrap();
    let ok: String = q(&mut admin, &["ACL", "LOAD"]).await;
    assert_eq!(ok, "OK");
    assert!(gone.read_until_closed().await.is_empty());
    // A user kept with other rules: its connection stays, under them.
    assert_eq!(kept.call(&["PING"]).await, "+PONG\r\n");
    assert_eq!(
        kept.call(&["GET", "k"]).await,
        "-NOPERM this user has no permissions to run the 'get' command\r\n"
    );
    assert_eq!(
        fresh.call(&["AUTH", "gw", "secret"]).await.get(..10),
        Some("-WRONGPASS")
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_bad_acl_file_refuses_the_start() {
    let path = temp_acl("refused");
    let start = |path: &std::path::Path| {
        let mut config = turnstile::Config::for_tests();
        config.aclfile = Some(path.to_owned());
        async move {
            turnstile::start(
                &config,
                std::sync::Arc::new(turnstile::ManualClock::new(turnstile::Nanos(0))),
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
        }
    };
    let shown = path.display();
    assert_eq!(
        start(&path).await.unwrap_err(),
        format!("Aborting startup because of ACL errors: Error loading ACLs, opening file '{shown}': No such file or directory")
    );
    std::fs::write(
        &path,
        "user gw on >secret ~tenant:* +@ratelimit\nuser x on +nosuch\n",
    )
    .unwrap();
    assert_eq!(
        start(&path).await.unwrap_err(),
        format!("Aborting startup because of ACL errors: {shown}:2: Error in applying operation '+nosuch': Unknown command or category name in ACL. WARNING: ACL errors detected, no change to the previously active ACL rules was performed")
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_load_and_save_without_a_file_answer_as_redis() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    for sub in ["LOAD", "SAVE"] {
        assert!(q_err(&mut admin, &["ACL", sub])
            .await
            .starts_with("ERR This Redis instance is not configured to use an ACL file."));
    }
}

/// `CLIENT KILL USER name` closes that user's connections only (it used
/// to ignore the filter and close every client but the caller); an
/// unknown user is Redis's error and closes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_user_closes_only_that_users_connections() {
    let srv = Server::start().await;
    let mut admin = srv.client().await;
    let _: String = q(&mut admin, GATEWAY).await;
    let mut gw1 = gateway(&srv).await;
    let mut gw2 = gateway(&srv).await;
    let mut bystander = srv.client().await;
    crate::common::assert_pong(&mut bystander).await;
    let _: Vec<i64> = q(&mut gw1, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    let _: Vec<i64> = q(&mut gw2, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    assert_eq!(
        q_err(&mut admin, &["CLIENT", "KILL", "USER", "nosuch"]).await,
        "ERR No such user 'nosuch'"
    );
    assert!(q_err(&mut admin, &["CLIENT", "KILL", "MAXAGE", "1"])
        .await
        .contains("syntax error"));
    crate::common::assert_pong(&mut bystander).await;
    let killed: i64 = q(&mut admin, &["CLIENT", "KILL", "USER", "gw"]).await;
    assert_eq!(killed, 2);
    crate::common::assert_pong(&mut bystander).await;
    let list: String = q(&mut admin, &["CLIENT", "LIST"]).await;
    assert!(!list.contains(" user=gw "), "{list}");
    let killed: i64 = q(
        &mut admin,
        &["CLIENT", "KILL", "USER", "default", "SKIPME", "yes"],
    )
    .await;
    assert_eq!(killed, 1);
}
