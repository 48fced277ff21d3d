//! Users in the config file (Redis's `user` lines of redis.conf): the
//! `user` setting at start, `CONFIG REWRITE` writing the users back as the
//! next start reads them, and what may not be combined or injected.

use std::sync::Arc;

use turnstile::clock::{ManualClock, Nanos};
use turnstile::Config;

use crate::common::*;
use crate::config_rewrite::{read_back, temp_dir};

async fn start_error(tweak: impl FnOnce(&mut Config)) -> String {
    let mut config = Config::for_tests();
    tweak(&mut config);
    let clock = ManualClock::new(Nanos(START_SECS * Nanos::PER_SEC));
    match turnstile::start(&config, Arc::new(clock)).await {
        Ok(_) => panic!("the server started"),
        Err(e) => e.to_string(),
    }
}

async fn as_user(srv: &Server, user: &str, pass: &str) -> redis::aio::MultiplexedConnection {
    connect_url(&srv.url(&format!("{user}:{pass}@"), ""))
        .await
        .expect("logs in")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_from_the_config_file_decides_on_its_keys_only() {
    let dir = temp_dir("start");
    let path = dir.join("turnstile.toml");
    std::fs::write(
        &path,
        "user = [\"gw on >gw-secret ~tenant:* +@ratelimit -@dangerous\", \"ops on >ops-secret ~* +@all\"]\n",
    )
    .unwrap();
    let lines = read_back(&path).user;
    assert_eq!(
        lines,
        [
            "gw on >gw-secret ~tenant:* +@ratelimit -@dangerous",
            "ops on >ops-secret ~* +@all"
        ]
    );
    let srv = Server::start_with(move |c| c.user = lines).await;
    let mut gw = as_user(&srv, "gw", "gw-secret").await;
    let r: Vec<i64> = q(&mut gw, &["RL.ALLOW", "tenant:1", "5", "60"]).await;
    assert_eq!(r[0], 1);
    assert!(q_err(&mut gw, &["RL.ALLOW", "other:1", "5", "60"])
        .await
        .starts_with("NOPERM"));
    assert!(q_err(&mut gw, &["RL.RESET", "tenant:1"])
        .await
        .starts_with("NOPERM"));
    // The default user is untouched (no password set): what a start makes.
    let mut c = srv.client().await;
    let list: Vec<String> = q(&mut c, &["ACL", "LIST"]).await;
    assert_eq!(list.len(), 3, "{list:?}");
    assert!(list[0].starts_with("user default on nopass"), "{list:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_rewrite_writes_the_users_the_next_start_reads() {
    let dir = temp_dir("rewrite");
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, "").unwrap();
    let p = path.clone();
    let a = Server::start_with(move |c| c.config = Some(p)).await;
    let mut c = a.client().await;
    for rules in [
        &["gw", "on", ">gw-secret", "~tenant:*", "+@ratelimit"][..],
        // TOML's quotes, a backslash and a would-be table in a password
        // and a pattern: each stays inside its string.
        &[
            "odd",
            "on",
            ">pa\"ss\\word]",
            "~a\"b[c]*",
            "+get",
            "(~sel:* +set)",
        ],
        &["off-user", "off", "nopass", "resetchannels", "-@all"],
    ] {
        let mut args = vec!["ACL", "SETUSER"];
        args.extend_from_slice(rules);
        let ok: String = q(&mut c, &args).await;
        assert_eq!(ok, "OK");
    }
    let before: Vec<String> = q(&mut c, &["ACL", "LIST"]).await;
    let ok: String = q(&mut c, &["CONFIG", "REWRITE"]).await;
    assert_eq!(ok, "OK");
    let text = std::fs::read_to_string(&path).unwrap();
    let users: Vec<&str> = text.lines().filter(|l| l.starts_with("user")).collect();
    assert_eq!(users.len(), 1, "one line for every user:\n{text}");
    assert!(!text.contains("gw-secret"), "no clear password:\n{text}");
    assert!(
        !text.contains("default"),
        "the default user is requirepass's:\n{text}"
    );
    let lines = read_back(&path).user;
    assert_eq!(lines.len(), 3, "{lines:?}");
    a.shutdown().await;
    let b = Server::start_with(move |c| c.user = lines).await;
    let mut c = b.client().await;
    let after: Vec<String> = q(&mut c, &["ACL", "LIST"]).await;
    assert_eq!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_default_user_is_written_and_users_are_refused_beside_an_acl_file() {
    let dir = temp_dir("default");
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, "").unwrap();
    let p = path.clone();
    let a = Server::start_with(move |c| c.config = Some(p)).await;
    let mut c = a.client().await;
    let _: String = q(
        &mut c,
        &["ACL", "SETUSER", "admin", "on", ">adm", "~*", "&*", "+@all"],
    )
    .await;
    let _: String = q(&mut c, &["ACL", "SETUSER", "default", "off"]).await;
    let _: String = q(&mut c, &["CONFIG", "REWRITE"]).await;
    let lines = read_back(&path).user;
    assert!(
        lines.iter().any(|l| l.starts_with("default off")),
        "{lines:?}"
    );
    drop(c);
    a.shutdown().await;
    let b = Server::start_with(move |c| c.user = lines).await;
    let mut anon = b.raw().await;
    assert!(anon.call(&["PING"]).await.starts_with("-NOAUTH"));

    let acl = dir.join("users.acl");
    std::fs::write(&acl, "user x on nopass +@all\n").unwrap();
    let e = start_error(move |c| {
        c.aclfile = Some(acl);
        c.user = vec!["y on nopass +@all".into()];
    })
    .await;
    assert!(
        e.contains(
            "users defined in redis.conf and at the same setting an ACL file path is invalid"
        ),
        "{e}"
    );
    let e =
        start_error(|c| c.user = vec!["a on nopass +@all\nuser evil on nopass +@all".into()]).await;
    assert!(e.contains("line break"), "{e}");
    let e = start_error(|c| c.user = vec!["a on +nosuchcommand".into()]).await;
    assert!(e.contains("user setting:1"), "{e}");
}
