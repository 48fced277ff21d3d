//! `--rename-command`: a renamed command answers only to its new name, a
//! disabled one to none, and a bad rename stops the server from starting.

use crate::common::{q, q_err, Server};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_and_disabled_commands() {
    let server = Server::start_with(|c| {
        c.rename_command = ["FLUSHALL", "", "CONFIG", "cfg-7f3a", "rl.reset", ""]
            .map(String::from)
            .to_vec()
    })
    .await;
    let mut c = server.client().await;
    let _: () = q(&mut c, &["SET", "k", "v"]).await;
    assert_eq!(
        q_err(&mut c, &["FLUSHALL"]).await,
        "ERR unknown command 'FLUSHALL', with args beginning with: "
    );
    assert_eq!(
        q_err(&mut c, &["CONFIG", "GET", "maxclients"]).await,
        "ERR unknown command 'CONFIG', with args beginning with: 'GET' 'maxclients' "
    );
    assert!(q_err(&mut c, &["RL.RESET", "k"])
        .await
        .starts_with("ERR unknown command 'RL.RESET'"));
    let got: Vec<String> = q(&mut c, &["CFG-7F3A", "GET", "maxclients"]).await;
    assert_eq!(got, ["maxclients", "10000"]);
    let keys: i64 = q(&mut c, &["DBSIZE"]).await;
    assert_eq!(keys, 1, "nothing was flushed");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_rename_refuses_to_start() {
    for (pair, want) in [
        (["NOPE", "x"], "rename-command: no command named 'NOPE'"),
        (
            ["FLUSHALL", "get"],
            "rename-command: 'get' is already a command name",
        ),
    ] {
        let config = turnstile::Config {
            rename_command: pair.map(String::from).to_vec(),
            ..turnstile::Config::for_tests()
        };
        let clock = Arc::new(turnstile::ManualClock::new(turnstile::Nanos(0)));
        let err = turnstile::start(&config, clock)
            .await
            .err()
            .expect("refused");
        assert_eq!(err.to_string(), want);
    }
}
