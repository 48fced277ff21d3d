//! SETEX, PSETEX, SETNX, GETEX, GETDEL, INCRBYFLOAT, RENAME, RENAMENX,
//! EXPIRETIME and PEXPIRETIME through the real `redis` crate client, with
//! Redis 7's replies and errors, on string and limiter keys, with time
//! driven by the manual clock.

use crate::common::*;
use redis::Value;

type Con = redis::aio::MultiplexedConnection;

async fn opt(con: &mut Con, args: &[&str]) -> Option<String> {
    q(con, args).await
}

async fn int(con: &mut Con, args: &[&str]) -> i64 {
    q(con, args).await
}

async fn val(con: &mut Con, args: &[&str]) -> Value {
    q(con, args).await
}

/// `RL.STATE key` as the reply value, for comparing a state before and
/// after it moves.
async fn rl_state(con: &mut Con, key: &str) -> Value {
    val(con, &["RL.STATE", key]).await
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_FLOAT: &str = "ERR value is not a valid float";

// ---------------------------------------------------------------------------
// SETEX, PSETEX, SETNX
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setex_and_psetex() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(val(&mut c, &["SETEX", "k", "10", "v"]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("v"));
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 10_000);
    assert_eq!(
        val(&mut c, &["PSETEX", "p", "1500", "w"]).await,
        Value::Okay
    );
    assert_eq!(int(&mut c, &["PTTL", "p"]).await, 1_500);
    // Each expires on the manual clock, to the millisecond.
    srv.advance_ms(1_499);
    assert_eq!(opt(&mut c, &["GET", "p"]).await.as_deref(), Some("w"));
    srv.advance_ms(1);
    assert_eq!(opt(&mut c, &["GET", "p"]).await, None);
    srv.advance_ms(8_499);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 1);
    srv.advance_ms(1);
    assert_eq!(int(&mut c, &["EXISTS", "k"]).await, 0);

    // They replace any value and TTL, as SET does.
    q::<()>(&mut c, &["SET", "k", "old", "EX", "5"]).await;
    q::<()>(&mut c, &["SETEX", "k", "100", "new"]).await;
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("new"));
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);

    // Errors, word for word; none changes the key.
    for (args, want) in [
        (
            vec!["SETEX", "k", "0", "v"],
            "ERR invalid expire time in 'setex' command",
        ),
        (
            vec!["SETEX", "k", "-1", "v"],
            "ERR invalid expire time in 'setex' command",
        ),
        (
            vec!["SETEX", "k", "9223372036854775807", "v"],
            "ERR invalid expire time in 'setex' command",
        ),
        // Past i64 once the current time is added.
        (
            vec!["SETEX", "k", "9223372036854775", "v"],
            "ERR invalid expire time in 'setex' command",
        ),
        (
            vec!["SETEX", "k", "1.5", "v"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec!["SETEX", "k", "ten", "v"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec!["PSETEX", "k", "0", "v"],
            "ERR invalid expire time in 'psetex' command",
        ),
        (
            vec!["PSETEX", "k", "9223372036854775807", "v"],
            "ERR invalid expire time in 'psetex' command",
        ),
        (
            vec!["PSETEX", "k", "x", "v"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec!["SETEX", "k", "10"],
            "ERR wrong number of arguments for 'setex' command",
        ),
        (
            vec!["PSETEX", "k", "10", "v", "extra"],
            "ERR wrong number of arguments for 'psetex' command",
        ),
    ] {
        assert_eq!(q_err(&mut c, &args).await, want, "{args:?}");
    }
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("new"));
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setnx() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["SETNX", "k", "first"]).await, 1);
    assert_eq!(int(&mut c, &["SETNX", "k", "second"]).await, 0);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("first"));
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -1);
    // An expired key counts as absent.
    q::<()>(&mut c, &["SET", "lock", "a", "PX", "100"]).await;
    assert_eq!(int(&mut c, &["SETNX", "lock", "b"]).await, 0);
    srv.advance_ms(100);
    assert_eq!(int(&mut c, &["SETNX", "lock", "b"]).await, 1);
    assert_eq!(opt(&mut c, &["GET", "lock"]).await.as_deref(), Some("b"));
    assert_eq!(int(&mut c, &["TTL", "lock"]).await, -1);
    assert_eq!(
        q_err(&mut c, &["SETNX", "k"]).await,
        "ERR wrong number of arguments for 'setnx' command"
    );
}

// ---------------------------------------------------------------------------
// GETEX, GETDEL
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getex_every_option() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(opt(&mut c, &["GETEX", "missing"]).await, None);
    // A missing key is nil before its time is even read.
    assert_eq!(opt(&mut c, &["GETEX", "missing", "EX", "soon"]).await, None);
    assert_eq!(opt(&mut c, &["GETEX", "missing", "EX", "0"]).await, None);

    q::<()>(&mut c, &["SET", "k", "v"]).await;
    // No option: a plain read, the TTL untouched.
    assert_eq!(opt(&mut c, &["GETEX", "k"]).await.as_deref(), Some("v"));
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -1);
    assert_eq!(
        opt(&mut c, &["GETEX", "k", "EX", "100"]).await.as_deref(),
        Some("v")
    );
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 100_000);
    assert_eq!(
        opt(&mut c, &["GETEX", "k", "px", "1500"]).await.as_deref(),
        Some("v")
    );
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 1_500);
    // The same option twice: the last one counts, as in Redis.
    assert_eq!(
        opt(&mut c, &["GETEX", "k", "EX", "10", "EX", "20"])
            .await
            .as_deref(),
        Some("v")
    );
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 20);
    let exat = (START_SECS + 30).to_string();
    q::<()>(&mut c, &["GETEX", "k", "EXAT", &exat]).await;
    assert_eq!(
        int(&mut c, &["EXPIRETIME", "k"]).await,
        START_SECS as i64 + 30
    );
    let pxat = (START_MS + 2_500).to_string();
    q::<()>(&mut c, &["GETEX", "k", "PXAT", &pxat]).await;
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 2_500);
    assert_eq!(
        opt(&mut c, &["GETEX", "k", "PERSIST"]).await.as_deref(),
        Some("v")
    );
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -1);
    assert_eq!(
        opt(&mut c, &["GETEX", "k", "PERSIST", "PERSIST"])
            .await
            .as_deref(),
        Some("v")
    );

    // The expiry runs on the manual clock.
    q::<()>(&mut c, &["GETEX", "k", "PX", "300"]).await;
    srv.advance_ms(299);
    assert_eq!(opt(&mut c, &["GETEX", "k"]).await.as_deref(), Some("v"));
    srv.advance_ms(1);
    assert_eq!(opt(&mut c, &["GETEX", "k"]).await, None);

    // An absolute time already past: the value, then the key is gone.
    for at in [vec!["EXAT", "1"], vec!["PXAT", "1000"]] {
        q::<()>(&mut c, &["SET", "k", "v"]).await;
        let args = [&["GETEX", "k"][..], &at].concat();
        assert_eq!(opt(&mut c, &args).await.as_deref(), Some("v"), "{at:?}");
        assert_eq!(int(&mut c, &["EXISTS", "k"]).await, 0, "{at:?}");
    }

    // Errors, word for word; none changes the key.
    q::<()>(&mut c, &["SET", "k", "v", "EX", "100"]).await;
    for (args, want) in [
        (vec!["GETEX", "k", "EX"], "ERR syntax error"),
        (
            vec!["GETEX", "k", "EX", "10", "PX", "10"],
            "ERR syntax error",
        ),
        (
            vec!["GETEX", "k", "PERSIST", "EX", "10"],
            "ERR syntax error",
        ),
        (
            vec!["GETEX", "k", "EX", "10", "PERSIST"],
            "ERR syntax error",
        ),
        (vec!["GETEX", "k", "KEEPTTL"], "ERR syntax error"),
        (vec!["GETEX", "k", "NX"], "ERR syntax error"),
        (vec!["GETEX", "k", "GET"], "ERR syntax error"),
        (vec!["GETEX", "k", "BOGUS"], "ERR syntax error"),
        // A syntax error comes before the key is looked at.
        (vec!["GETEX", "missing", "BOGUS"], "ERR syntax error"),
        (
            vec!["GETEX", "k", "EX", "0"],
            "ERR invalid expire time in 'getex' command",
        ),
        (
            vec!["GETEX", "k", "PX", "-1"],
            "ERR invalid expire time in 'getex' command",
        ),
        (
            vec!["GETEX", "k", "EXAT", "0"],
            "ERR invalid expire time in 'getex' command",
        ),
        (
            vec!["GETEX", "k", "EX", "9223372036854775807"],
            "ERR invalid expire time in 'getex' command",
        ),
        (
            vec!["GETEX", "k", "EXAT", "9223372036854776"],
            "ERR invalid expire time in 'getex' command",
        ),
        (
            vec!["GETEX", "k", "PX", "9223372036854775807"],
            "ERR invalid expire time in 'getex' command",
        ),
        (
            vec!["GETEX", "k", "EX", "soon"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec!["GETEX"],
            "ERR wrong number of arguments for 'getex' command",
        ),
    ] {
        assert_eq!(q_err(&mut c, &args).await, want, "{args:?}");
    }
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);
    // The largest PXAT is kept exactly.
    q::<()>(&mut c, &["GETEX", "k", "PXAT", "9223372036854775807"]).await;
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]).await, i64::MAX);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getdel() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(opt(&mut c, &["GETDEL", "missing"]).await, None);
    q::<()>(&mut c, &["SET", "k", "v", "EX", "10"]).await;
    assert_eq!(opt(&mut c, &["GETDEL", "k"]).await.as_deref(), Some("v"));
    assert_eq!(int(&mut c, &["EXISTS", "k"]).await, 0);
    assert_eq!(opt(&mut c, &["GETDEL", "k"]).await, None);
    // An expired key is already gone.
    q::<()>(&mut c, &["SET", "k", "v", "PX", "5"]).await;
    srv.advance_ms(5);
    assert_eq!(opt(&mut c, &["GETDEL", "k"]).await, None);
    assert_eq!(
        q_err(&mut c, &["GETDEL", "a", "b"]).await,
        "ERR wrong number of arguments for 'getdel' command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nil_replies_in_resp3() {
    let srv = Server::start().await;
    let mut c = srv.client3().await;
    assert_eq!(val(&mut c, &["GETEX", "missing"]).await, Value::Nil);
    assert_eq!(
        val(&mut c, &["GETEX", "missing", "PERSIST"]).await,
        Value::Nil
    );
    assert_eq!(val(&mut c, &["GETDEL", "missing"]).await, Value::Nil);
    assert_eq!(
        val(&mut c, &["INCRBYFLOAT", "f", "1.5"]).await,
        Value::BulkString(b"1.5".to_vec())
    );
    let mut raw = srv.raw().await;
    assert_eq!(raw.call(&["HELLO", "3"]).await.chars().next(), Some('%'));
    assert_eq!(raw.call(&["GETDEL", "missing"]).await, "_\r\n");
    assert_eq!(
        raw.call(&["INCRBYFLOAT", "f", "0.1"]).await,
        "$3\r\n1.6\r\n"
    );
    assert_eq!(raw.call(&["SETNX", "f", "x"]).await, ":0\r\n");
    assert_eq!(raw.call(&["EXPIRETIME", "f"]).await, ":-1\r\n");
}

// ---------------------------------------------------------------------------
// INCRBYFLOAT
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incrbyfloat_as_redis_prints_it() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    // The example of Redis's documentation, with its replies.
    q::<()>(&mut c, &["SET", "mykey", "10.50"]).await;
    for (by, want) in [("0.1", "10.6"), ("-5", "5.6")] {
        assert_eq!(
            opt(&mut c, &["INCRBYFLOAT", "mykey", by]).await.as_deref(),
            Some(want)
        );
    }
    q::<()>(&mut c, &["SET", "mykey", "5.0e3"]).await;
    assert_eq!(
        opt(&mut c, &["INCRBYFLOAT", "mykey", "2.0e2"])
            .await
            .as_deref(),
        Some("5200")
    );
    assert_eq!(
        opt(&mut c, &["GET", "mykey"]).await.as_deref(),
        Some("5200")
    );
    // Long double, not f64: 0.1 stays 0.1, and 1e17 + 1 is exact.
    for (start, by, want) in [
        (None, "0.1", "0.1"),
        (Some("0.1"), "0.2", "0.3"),
        (Some("1e17"), "1", "100000000000000001"),
        (None, "1.5e-10", "0.00000000015"),
        (None, "-0", "0"),
        (Some("-0"), "-0.0", "0"),
        (None, "1e-18", "0"),
        (None, "0x1.8p1", "3"),
        (Some("3.0000000000000000001"), "0", "3"),
        (Some("007"), "1", "8"),
        (Some("1"), "-1", "0"),
    ] {
        match start {
            Some(v) => q::<()>(&mut c, &["SET", "f", v]).await,
            None => q::<()>(&mut c, &["DEL", "f"]).await,
        }
        assert_eq!(
            opt(&mut c, &["INCRBYFLOAT", "f", by]).await.as_deref(),
            Some(want),
            "{start:?} + {by}"
        );
        assert_eq!(opt(&mut c, &["GET", "f"]).await.as_deref(), Some(want));
    }

    // It keeps the TTL; an expired value starts from 0 with none.
    q::<()>(&mut c, &["SET", "f", "1", "EX", "60"]).await;
    assert_eq!(
        opt(&mut c, &["INCRBYFLOAT", "f", "0.5"]).await.as_deref(),
        Some("1.5")
    );
    assert_eq!(int(&mut c, &["TTL", "f"]).await, 60);
    srv.advance_ms(60_000);
    assert_eq!(
        opt(&mut c, &["INCRBYFLOAT", "f", "0.5"]).await.as_deref(),
        Some("0.5")
    );
    assert_eq!(int(&mut c, &["TTL", "f"]).await, -1);

    // Errors, word for word; none changes the key.
    q::<()>(&mut c, &["SET", "f", "2.5"]).await;
    for by in [
        "abc", "", " 1", "1 ", "1e", "1..2", "nan", "0x", "1e5000", "1e-5000", "1,5",
    ] {
        assert_eq!(
            q_err(&mut c, &["INCRBYFLOAT", "f", by]).await,
            NOT_FLOAT,
            "{by:?}"
        );
    }
    let too_long = "0".repeat(5120);
    assert_eq!(
        q_err(&mut c, &["INCRBYFLOAT", "f", &too_long]).await,
        NOT_FLOAT
    );
    for by in ["inf", "-inf", "1.18973149535723176502e+4932"] {
        q::<()>(&mut c, &["SET", "big", "1.18973149535723176502e+4932"]).await;
        assert_eq!(
            q_err(&mut c, &["INCRBYFLOAT", "big", by]).await,
            "ERR increment would produce NaN or Infinity",
            "{by:?}"
        );
    }
    assert_eq!(opt(&mut c, &["GET", "f"]).await.as_deref(), Some("2.5"));
    // The value held is read first, then the increment.
    for held in ["hello", "", " 1", "nan"] {
        q::<()>(&mut c, &["SET", "s", held]).await;
        assert_eq!(
            q_err(&mut c, &["INCRBYFLOAT", "s", "1"]).await,
            NOT_FLOAT,
            "{held:?}"
        );
        assert_eq!(opt(&mut c, &["GET", "s"]).await.as_deref(), Some(held));
    }
    q::<()>(&mut c, &["SET", "s", "inf"]).await;
    assert_eq!(
        q_err(&mut c, &["INCRBYFLOAT", "s", "1"]).await,
        "ERR increment would produce NaN or Infinity"
    );
    assert_eq!(
        q_err(&mut c, &["INCRBYFLOAT", "s"]).await,
        "ERR wrong number of arguments for 'incrbyfloat' command"
    );
    assert_eq!(int(&mut c, &["EXISTS", "missing"]).await, 0);
    assert_eq!(
        q_err(&mut c, &["INCRBYFLOAT", "missing", "x"]).await,
        NOT_FLOAT
    );
    assert_eq!(int(&mut c, &["EXISTS", "missing"]).await, 0);
}

// ---------------------------------------------------------------------------
// EXPIRETIME, PEXPIRETIME
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiretime_and_pexpiretime() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["EXPIRETIME", "missing"]).await, -2);
    assert_eq!(int(&mut c, &["PEXPIRETIME", "missing"]).await, -2);
    q::<()>(&mut c, &["SET", "k", "v"]).await;
    assert_eq!(int(&mut c, &["EXPIRETIME", "k"]).await, -1);
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]).await, -1);
    q::<()>(&mut c, &["PEXPIRE", "k", "1499"]).await;
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "k"]).await,
        START_MS as i64 + 1_499
    );
    // Rounded to the nearest second, as Redis does.
    assert_eq!(
        int(&mut c, &["EXPIRETIME", "k"]).await,
        START_SECS as i64 + 1
    );
    q::<()>(&mut c, &["PEXPIRE", "k", "1500"]).await;
    assert_eq!(
        int(&mut c, &["EXPIRETIME", "k"]).await,
        START_SECS as i64 + 2
    );
    // Absolute: the same as time goes by.
    srv.advance_ms(1_000);
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "k"]).await,
        START_MS as i64 + 1_500
    );
    srv.advance_ms(500);
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]).await, -2);
    q::<()>(&mut c, &["SET", "k", "v", "PXAT", "9223372036854775807"]).await;
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]).await, i64::MAX);
    assert_eq!(
        int(&mut c, &["EXPIRETIME", "k"]).await,
        9_223_372_036_854_776
    );
    assert_eq!(
        q_err(&mut c, &["EXPIRETIME", "a", "b"]).await,
        "ERR wrong number of arguments for 'expiretime' command"
    );
    assert_eq!(
        q_err(&mut c, &["PEXPIRETIME"]).await,
        "ERR wrong number of arguments for 'pexpiretime' command"
    );
}

// ---------------------------------------------------------------------------
// RENAME, RENAMENX
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_and_renamenx() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    for cmd in ["RENAME", "RENAMENX"] {
        assert_eq!(q_err(&mut c, &[cmd, "a", "b"]).await, "ERR no such key");
        // Onto itself too: the source must exist.
        assert_eq!(q_err(&mut c, &[cmd, "a", "a"]).await, "ERR no such key");
    }
    q::<()>(&mut c, &["SET", "a", "1", "PX", "5000"]).await;
    assert_eq!(val(&mut c, &["RENAME", "a", "b"]).await, Value::Okay);
    assert_eq!(int(&mut c, &["EXISTS", "a"]).await, 0);
    assert_eq!(opt(&mut c, &["GET", "b"]).await.as_deref(), Some("1"));
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "b"]).await,
        START_MS as i64 + 5_000
    );
    // The destination is replaced, TTL and all.
    q::<()>(&mut c, &["SET", "a", "2"]).await;
    assert_eq!(val(&mut c, &["RENAME", "a", "b"]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["GET", "b"]).await.as_deref(), Some("2"));
    assert_eq!(int(&mut c, &["TTL", "b"]).await, -1);
    // Onto itself: nothing moves.
    assert_eq!(val(&mut c, &["RENAME", "b", "b"]).await, Value::Okay);
    assert_eq!(int(&mut c, &["RENAMENX", "b", "b"]).await, 0);
    assert_eq!(opt(&mut c, &["GET", "b"]).await.as_deref(), Some("2"));

    // RENAMENX moves only to a free name.
    q::<()>(&mut c, &["SET", "x", "3"]).await;
    assert_eq!(int(&mut c, &["RENAMENX", "x", "b"]).await, 0);
    assert_eq!(opt(&mut c, &["GET", "x"]).await.as_deref(), Some("3"));
    assert_eq!(opt(&mut c, &["GET", "b"]).await.as_deref(), Some("2"));
    assert_eq!(int(&mut c, &["RENAMENX", "x", "y"]).await, 1);
    assert_eq!(int(&mut c, &["EXISTS", "x"]).await, 0);
    assert_eq!(opt(&mut c, &["GET", "y"]).await.as_deref(), Some("3"));
    // An expired destination is free; an expired source is missing.
    q::<()>(&mut c, &["SET", "old", "v", "PX", "10"]).await;
    q::<()>(&mut c, &["SET", "gone", "v", "PX", "10"]).await;
    srv.advance_ms(10);
    assert_eq!(int(&mut c, &["RENAMENX", "y", "old"]).await, 1);
    assert_eq!(opt(&mut c, &["GET", "old"]).await.as_deref(), Some("3"));
    assert_eq!(
        q_err(&mut c, &["RENAME", "gone", "z"]).await,
        "ERR no such key"
    );

    // The moved key expires when the source would have.
    q::<()>(&mut c, &["SET", "t", "v", "PX", "300"]).await;
    srv.advance_ms(100);
    q::<()>(&mut c, &["RENAME", "t", "u"]).await;
    assert_eq!(int(&mut c, &["PTTL", "u"]).await, 200);
    srv.advance_ms(200);
    assert_eq!(int(&mut c, &["EXISTS", "u"]).await, 0);

    for cmd in ["rename", "renamenx"] {
        assert_eq!(
            q_err(&mut c, &[cmd, "a"]).await,
            format!("ERR wrong number of arguments for '{cmd}' command")
        );
    }
    // Both arguments are keys.
    let keys: Vec<String> = q(&mut c, &["COMMAND", "GETKEYS", "RENAME", "a", "b"]).await;
    assert_eq!(keys, ["a", "b"]);
}

/// The shard of the store holding `key`.
fn shard_of(srv: &Server, key: &[u8]) -> usize {
    let store = &srv.state().store;
    let now = turnstile::Nanos(START_SECS * turnstile::Nanos::PER_SEC);
    (0..store.shard_count())
        .find(|&i| {
            let mut found = false;
            store.for_each_in_shard(i, now, |k, _| found |= k == key);
            found
        })
        .expect("the key is stored")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_across_shards() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    q::<()>(&mut c, &["SET", "src", "v", "EX", "100"]).await;
    let from = shard_of(&srv, b"src");
    // A destination name in another shard (each one is with 255 in 256).
    let mut to = None;
    for i in 0..64 {
        let name = format!("dst{i}");
        q::<()>(&mut c, &["SET", &name, "x"]).await;
        if shard_of(&srv, name.as_bytes()) != from {
            to = Some(name);
            break;
        }
    }
    let to = to.expect("a name in another shard");
    assert_eq!(val(&mut c, &["RENAME", "src", &to]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["GET", &to]).await.as_deref(), Some("v"));
    assert_eq!(int(&mut c, &["TTL", &to]).await, 100);
    assert_eq!(int(&mut c, &["EXISTS", "src"]).await, 0);
    assert_ne!(shard_of(&srv, to.as_bytes()), from);
    // And back, with RENAMENX.
    assert_eq!(int(&mut c, &["RENAMENX", &to, "src"]).await, 1);
    assert_eq!(shard_of(&srv, b"src"), from);
    assert_eq!(opt(&mut c, &["GET", "src"]).await.as_deref(), Some("v"));

    // Many renames over two keys from several clients at once: each key
    // is always in exactly one place.
    q::<()>(&mut c, &["SET", "ping", "ball"]).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut c = srv.client().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                for (a, b) in [("ping", "pong"), ("pong", "ping")] {
                    let _: redis::RedisResult<Value> =
                        cmd(&["RENAME", a, b]).query_async(&mut c).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(int(&mut c, &["EXISTS", "ping", "pong"]).await, 1);
}

// ---------------------------------------------------------------------------
// Limiter keys
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiter_keys_are_not_strings() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let allow = |key: &'static str| ["RL.ALLOW", key, "10", "60"];
    q::<Value>(&mut c, &allow("lim")).await;
    let state = rl_state(&mut c, "lim").await;
    for args in [
        vec!["GETEX", "lim"],
        vec!["GETEX", "lim", "PERSIST"],
        vec!["GETEX", "lim", "EX", "10"],
        // WRONGTYPE comes before the time is read.
        vec!["GETEX", "lim", "EX", "soon"],
        vec!["GETDEL", "lim"],
        vec!["INCRBYFLOAT", "lim", "1"],
        vec!["INCRBYFLOAT", "lim", "abc"],
    ] {
        assert_eq!(q_err(&mut c, &args).await, WRONGTYPE, "{args:?}");
    }
    // A syntax error comes first.
    assert_eq!(
        q_err(&mut c, &["GETEX", "lim", "BOGUS"]).await,
        "ERR syntax error"
    );
    assert_eq!(rl_state(&mut c, "lim").await, state, "nothing changed");

    // SETNX leaves any value alone.
    assert_eq!(int(&mut c, &["SETNX", "lim", "v"]).await, 0);
    assert_eq!(rl_state(&mut c, "lim").await, state);

    // EXPIRETIME works on any key: a limiter key's TTL is when its state
    // stops mattering (window: the end of the next bucket).
    let pttl = int(&mut c, &["PTTL", "lim"]).await;
    assert!(pttl > 60_000 && pttl <= 120_000, "{pttl}");
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "lim"]).await,
        START_MS as i64 + pttl
    );
    assert_eq!(
        int(&mut c, &["EXPIRETIME", "lim"]).await,
        (START_MS as i64 + pttl + 500) / 1000
    );
    q::<()>(&mut c, &["PERSIST", "lim"]).await;
    assert_eq!(int(&mut c, &["EXPIRETIME", "lim"]).await, -1);

    // SETEX and PSETEX replace it, as SET does.
    q::<Value>(&mut c, &allow("l2")).await;
    assert_eq!(val(&mut c, &["SETEX", "l2", "10", "s"]).await, Value::Okay);
    assert_eq!(
        opt(&mut c, &["TYPE", "l2"]).await.as_deref(),
        Some("string")
    );
    assert_eq!(opt(&mut c, &["GET", "l2"]).await.as_deref(), Some("s"));
    assert_eq!(int(&mut c, &["TTL", "l2"]).await, 10);
    q::<Value>(&mut c, &["RL.ALLOW", "l3", "10", "60", "ALGO", "gcra"]).await;
    q::<()>(&mut c, &["PSETEX", "l3", "500", "s"]).await;
    assert_eq!(opt(&mut c, &["GET", "l3"]).await.as_deref(), Some("s"));
    assert_eq!(int(&mut c, &["PTTL", "l3"]).await, 500);
    // An error leaves it as it was.
    q::<Value>(&mut c, &allow("l4")).await;
    assert_eq!(
        q_err(&mut c, &["SETEX", "l4", "0", "s"]).await,
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(
        opt(&mut c, &["TYPE", "l4"]).await.as_deref(),
        Some("rl-window")
    );
}

/// RENAME moves a limiter key's whole state and its TTL, for every
/// algorithm, whether the key is stored packed (TTL derived from the
/// state) or whole (a key over 16 bytes, or a TTL set by EXPIRE), and
/// whichever way the new name is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_moves_limiter_state_and_ttl() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let long = "a-limiter-key-longer-than-sixteen-bytes";
    for algo in ["window", "fixed", "gcra", "log"] {
        for (from, to, expire) in [
            ("short", "moved", None),
            ("short", long, None),
            (long, "moved", None),
            ("short", "moved", Some("500000")),
            (long, "moved2", Some("90000")),
        ] {
            let what = format!("{algo}: {from} -> {to}, PEXPIRE {expire:?}");
            q::<()>(&mut c, &["FLUSHALL"]).await;
            for _ in 0..3 {
                q::<Value>(&mut c, &["RL.ALLOW", from, "10", "60", "ALGO", algo]).await;
            }
            if let Some(ms) = expire {
                q::<()>(&mut c, &["PEXPIRE", from, ms]).await;
            }
            // The state is read a little later than it was written.
            srv.advance_ms(1_000);
            let state = rl_state(&mut c, from).await;
            let at = int(&mut c, &["PEXPIRETIME", from]).await;
            assert!(at > 0, "{what}");
            assert_eq!(val(&mut c, &["RENAME", from, to]).await, Value::Okay);
            assert_eq!(int(&mut c, &["EXISTS", from]).await, 0, "{what}");
            assert_eq!(rl_state(&mut c, to).await, state, "{what}");
            assert_eq!(int(&mut c, &["PEXPIRETIME", to]).await, at, "{what}");
            let kind = format!("rl-{algo}");
            assert_eq!(opt(&mut c, &["TYPE", to]).await, Some(kind), "{what}");
            // It goes on counting from there: 3 spent, 6 left after this.
            let reply: Vec<i64> = q(&mut c, &["RL.ALLOW", to, "10", "60", "ALGO", algo]).await;
            assert_eq!(reply[..3], [1, 10, 6], "{what}");
            // And goes when its TTL comes.
            let pttl = int(&mut c, &["PTTL", to]).await as u64;
            srv.advance_ms(pttl - 1);
            assert_eq!(int(&mut c, &["EXISTS", to]).await, 1, "{what}");
            srv.advance_ms(1);
            assert_eq!(int(&mut c, &["EXISTS", to]).await, 0, "{what}");
        }
    }
}

/// RENAMENX onto a limiter key refuses; RENAME replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_onto_a_limiter_key() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    q::<Value>(&mut c, &["RL.ALLOW", "lim", "10", "60"]).await;
    q::<()>(&mut c, &["SET", "s", "v"]).await;
    assert_eq!(int(&mut c, &["RENAMENX", "s", "lim"]).await, 0);
    assert_eq!(
        opt(&mut c, &["TYPE", "lim"]).await.as_deref(),
        Some("rl-window")
    );
    assert_eq!(val(&mut c, &["RENAME", "s", "lim"]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["GET", "lim"]).await.as_deref(), Some("v"));
    assert_eq!(int(&mut c, &["TTL", "lim"]).await, -1);
}

// ---------------------------------------------------------------------------
// In a transaction
// ---------------------------------------------------------------------------

/// Inside EXEC the commands run on the shards the transaction holds
/// (`ctx.db`): RENAME over two keys and the rest neither deadlock nor let
/// another client's write in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_multi_exec() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    q::<Value>(&mut c, &["RL.ALLOW", "lim", "10", "60"]).await;
    let mut raw = srv.raw().await;
    assert_eq!(raw.call(&["MULTI"]).await, "+OK\r\n");
    for args in [
        &["SETEX", "a", "100", "1"][..],
        &["INCRBYFLOAT", "a", "0.5"],
        &["RENAME", "a", "b"],
        &["RENAMENX", "lim", "lim2"],
        &["GETEX", "b", "PERSIST"],
        &["SETNX", "b", "x"],
        &["GETDEL", "b"],
        &["EXPIRETIME", "b"],
        &["GETDEL", "lim2"],
        &["PSETEX", "c", "100", "v"],
        &["GETEX", "c", "PXAT", "1"],
    ] {
        assert_eq!(raw.call(args).await, "+QUEUED\r\n", "{args:?}");
    }
    assert_eq!(
        raw.call(&["EXEC"]).await,
        concat!(
            "*11\r\n",
            "+OK\r\n",
            "$3\r\n1.5\r\n",
            "+OK\r\n",
            ":1\r\n",
            "$3\r\n1.5\r\n",
            ":0\r\n",
            "$3\r\n1.5\r\n",
            ":-2\r\n",
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            "+OK\r\n",
            "$1\r\nv\r\n",
        )
    );
    assert_eq!(int(&mut c, &["EXISTS", "a", "b", "c", "lim"]).await, 0);
    assert_eq!(
        opt(&mut c, &["TYPE", "lim2"]).await.as_deref(),
        Some("rl-window")
    );
}

/// SET reads its options as Redis does: the same option again is allowed
/// (the last expiry counts), two different expiries or one with KEEPTTL
/// are a syntax error, and the expiry is parsed only after every option,
/// so a syntax error anywhere wins over a bad number (it used to refuse
/// `EX 10 EX 20` and `NX NX`; `tests/compat/diff_cases/strings.txt`
/// compares all of it with redis-server byte for byte).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_options_repeated_and_conflicting() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(
        opt(&mut c, &["SET", "k", "v", "EX", "10", "EX", "20"])
            .await
            .as_deref(),
        Some("OK")
    );
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 20);
    assert_eq!(
        opt(&mut c, &["SET", "k", "v", "EX", "abc", "EX", "30"])
            .await
            .as_deref(),
        Some("OK")
    );
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 30);
    assert_eq!(
        opt(&mut c, &["SET", "k", "w", "NX", "NX"]).await,
        None,
        "exists: NX sets nothing"
    );
    for (args, err) in [
        (
            &["SET", "k", "v", "EX", "30", "EX", "abc"][..],
            "ERR value is not an integer or out of range",
        ),
        (
            &["SET", "k", "v", "EX", "10", "PX", "20"],
            "ERR syntax error",
        ),
        (
            &["SET", "k", "v", "KEEPTTL", "EX", "10"],
            "ERR syntax error",
        ),
        (&["SET", "k", "v", "NX", "XX"], "ERR syntax error"),
        (&["SET", "k", "v", "EX", "abc", "FOO"], "ERR syntax error"),
    ] {
        assert_eq!(q_err(&mut c, args).await, err, "{args:?}");
    }
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("v"));
    srv.shutdown().await;
}
