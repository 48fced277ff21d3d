//! Every command of the Redis-compatible subset, through the real `redis`
//! crate client (RESP2 and RESP3), with time driven by the manual clock.

use std::collections::{HashMap, HashSet};

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

// ---------------------------------------------------------------------------
// Connection commands
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_and_echo() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(
        val(&mut c, &["PING"]).await,
        Value::SimpleString("PONG".into())
    );
    assert_eq!(
        val(&mut c, &["PING", "hello world"]).await,
        Value::BulkString(b"hello world".to_vec())
    );
    assert_eq!(
        q_err(&mut c, &["PING", "a", "b"]).await,
        "ERR wrong number of arguments for 'ping' command"
    );
    let echoed: Vec<u8> = q(&mut c, &["ECHO", "bin\0ary\r\n"]).await;
    assert_eq!(echoed, b"bin\0ary\r\n");
    assert_eq!(
        q_err(&mut c, &["ECHO"]).await,
        "ERR wrong number of arguments for 'echo' command"
    );
    // Command names match case-insensitively.
    assert_eq!(
        val(&mut c, &["pInG"]).await,
        Value::SimpleString("PONG".into())
    );
}

fn hello_fields(v: &Value) -> HashMap<String, Value> {
    pairs(v).into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_2_and_3_reply_fields() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let id = int(&mut c, &["CLIENT", "ID"]).await;

    let reply = val(&mut c, &["HELLO", "2"]).await;
    assert!(
        matches!(reply, Value::Array(ref a) if a.len() == 14),
        "{reply:?}"
    );
    let f = hello_fields(&reply);
    assert_eq!(text(&f["server"]), "redis");
    assert_eq!(text(&f["version"]), turnstile::REDIS_VERSION);
    assert_eq!(f["proto"], Value::Int(2));
    assert_eq!(f["id"], Value::Int(id));
    assert_eq!(text(&f["mode"]), "standalone");
    assert_eq!(text(&f["role"]), "master");
    assert_eq!(f["modules"], Value::Array(vec![]));
    assert_eq!(f.len(), 7);

    let mut c3 = srv.client3().await;
    let id3 = int(&mut c3, &["CLIENT", "ID"]).await;
    let reply = val(&mut c3, &["HELLO", "3"]).await;
    assert!(
        matches!(reply, Value::Map(ref m) if m.len() == 7),
        "{reply:?}"
    );
    let f = hello_fields(&reply);
    assert_eq!(f["proto"], Value::Int(3));
    assert_eq!(f["id"], Value::Int(id3));
    assert_eq!(text(&f["server"]), "redis");

    // HELLO with no version reports the current protocol.
    let f = hello_fields(&val(&mut c3, &["HELLO"]).await);
    assert_eq!(f["proto"], Value::Int(3));

    assert_eq!(
        q_err(&mut c, &["HELLO", "4"]).await,
        "NOPROTO unsupported protocol version"
    );
    assert_eq!(
        q_err(&mut c, &["HELLO", "two"]).await,
        "ERR Protocol version is not an integer or out of range"
    );
    // A failed HELLO leaves the protocol alone.
    let f = hello_fields(&val(&mut c, &["HELLO"]).await);
    assert_eq!(f["proto"], Value::Int(2));

    // HELLO SETNAME names the connection.
    val(&mut c, &["HELLO", "2", "SETNAME", "hello-name"]).await;
    assert_eq!(
        opt(&mut c, &["CLIENT", "GETNAME"]).await.as_deref(),
        Some("hello-name")
    );
    assert_eq!(
        q_err(&mut c, &["HELLO", "2", "BOGUS"]).await,
        "ERR Syntax error in HELLO option 'BOGUS'"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_only_db_zero() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(val(&mut c, &["SELECT", "0"]).await, Value::Okay);
    assert_eq!(
        q_err(&mut c, &["SELECT", "1"]).await,
        "ERR DB index is out of range"
    );
    assert_eq!(
        q_err(&mut c, &["SELECT", "x"]).await,
        "ERR value is not an integer or out of range"
    );
    // A client asking for db 0 in its URL connects fine.
    let mut c0 = connect_url(&format!("redis://{}/0", srv.addr))
        .await
        .unwrap();
    assert_pong(&mut c0).await;
    // One asking for db 1 is refused at connect.
    assert!(connect_url(&format!("redis://{}/1", srv.addr))
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_setname_getname_setinfo_id_info_list() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let mut other = srv.client().await;
    let id = int(&mut c, &["CLIENT", "ID"]).await;
    let other_id = int(&mut other, &["CLIENT", "ID"]).await;
    assert!(id > 0 && other_id > 0 && id != other_id);

    assert_eq!(opt(&mut c, &["CLIENT", "GETNAME"]).await, None);
    assert_eq!(
        val(&mut c, &["CLIENT", "SETNAME", "worker-1"]).await,
        Value::Okay
    );
    assert_eq!(
        opt(&mut c, &["CLIENT", "GETNAME"]).await.as_deref(),
        Some("worker-1")
    );
    assert_eq!(
        q_err(&mut c, &["CLIENT", "SETNAME", "has space"]).await,
        "ERR Client names cannot contain spaces, newlines or special characters."
    );
    assert_eq!(
        opt(&mut c, &["CLIENT", "GETNAME"]).await.as_deref(),
        Some("worker-1")
    );

    assert_eq!(
        val(&mut c, &["CLIENT", "SETINFO", "LIB-NAME", "mylib"]).await,
        Value::Okay
    );
    assert_eq!(
        val(&mut c, &["CLIENT", "SETINFO", "lib-ver", "1.2.3"]).await,
        Value::Okay
    );
    assert_eq!(
        q_err(&mut c, &["CLIENT", "SETINFO", "COLOR", "blue"]).await,
        "ERR Unrecognized option 'COLOR'"
    );

    let info: String = q(&mut c, &["CLIENT", "INFO"]).await;
    assert!(info.ends_with('\n'), "{info:?}");
    assert_eq!(info.lines().count(), 1, "{info:?}");
    let fields: HashMap<&str, &str> = info
        .trim_end()
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    assert_eq!(fields["id"], id.to_string());
    assert_eq!(fields["name"], "worker-1");
    assert_eq!(fields["lib-name"], "mylib");
    assert_eq!(fields["lib-ver"], "1.2.3");
    assert_eq!(fields["resp"], "2");
    assert_eq!(fields["db"], "0");
    assert!(fields["addr"].starts_with("127.0.0.1:"), "{info}");
    assert_eq!(fields["laddr"], srv.addr.to_string());

    // The redis crate announces itself with CLIENT SETINFO on connect.
    let other_info: String = q(&mut other, &["CLIENT", "INFO"]).await;
    assert!(other_info.contains(" lib-name=redis-rs "), "{other_info}");

    let list: String = q(&mut c, &["CLIENT", "LIST"]).await;
    let ids: Vec<String> = list
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    assert!(ids.contains(&format!("id={id}")), "{list}");
    assert!(ids.contains(&format!("id={other_id}")), "{list}");
    assert!(list.contains(" name=worker-1 "), "{list}");

    let only: String = q(&mut c, &["CLIENT", "LIST", "ID", &other_id.to_string()]).await;
    assert_eq!(only.lines().count(), 1, "{only}");
    assert!(only.starts_with(&format!("id={other_id} ")), "{only}");

    // An empty name clears it.
    assert_eq!(val(&mut c, &["CLIENT", "SETNAME", ""]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["CLIENT", "GETNAME"]).await, None);

    assert_eq!(
        q_err(&mut c, &["CLIENT", "nope"]).await,
        "ERR unknown subcommand 'nope'. Try CLIENT HELP."
    );
    let help: Vec<String> = q(&mut c, &["CLIENT", "HELP"]).await;
    assert!(help[0].starts_with("CLIENT <subcommand>"), "{help:?}");
}

// ---------------------------------------------------------------------------
// COMMAND, CONFIG, INFO
// ---------------------------------------------------------------------------

/// The subset SPEC.md lists.
const SUBSET: [&str; 36] = [
    "ping",
    "echo",
    "hello",
    "auth",
    "select",
    "quit",
    "reset",
    "client",
    "command",
    "config",
    "info",
    "dbsize",
    "flushall",
    "flushdb",
    "time",
    "del",
    "unlink",
    "exists",
    "type",
    "ttl",
    "pttl",
    "expire",
    "pexpire",
    "expireat",
    "pexpireat",
    "persist",
    "scan",
    "keys",
    "get",
    "set",
    "mget",
    "mset",
    "incr",
    "incrby",
    "decr",
    "decrby",
];

fn flag_names(v: &Value) -> HashSet<String> {
    match v {
        Value::Array(a) | Value::Set(a) => a.iter().map(text).collect(),
        other => panic!("not a flag list: {other:?}"),
    }
}

fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_count_list_info_docs() {
    let srv = Server::start().await;
    let mut c = srv.client().await;

    let count = int(&mut c, &["COMMAND", "COUNT"]).await;
    assert_eq!(
        count as usize,
        turnstile::cmd::registry::table::COMMANDS.len()
    );
    assert!(count >= SUBSET.len() as i64);

    let all = val(&mut c, &["COMMAND"]).await;
    assert_eq!(array(&all).len() as i64, count);
    let names: HashSet<String> = array(&all).iter().map(|e| text(&array(e)[0])).collect();
    for name in SUBSET {
        assert!(names.contains(name), "COMMAND lacks {name}");
    }

    let list: Vec<String> = q(&mut c, &["COMMAND", "LIST"]).await;
    for name in SUBSET {
        assert!(list.iter().any(|n| n == name), "COMMAND LIST lacks {name}");
    }
    for sub in [
        "client|setname",
        "client|kill",
        "command|getkeys",
        "config|get",
    ] {
        assert!(list.iter().any(|n| n == sub), "COMMAND LIST lacks {sub}");
    }
    let mut ex: Vec<String> = q(&mut c, &["COMMAND", "LIST", "FILTERBY", "PATTERN", "ex*"]).await;
    ex.sort();
    assert!(ex.iter().all(|n| n.starts_with("ex")), "{ex:?}");
    for n in ["exists", "expire", "expireat"] {
        assert!(ex.iter().any(|e| e == n), "{ex:?}");
    }

    // COMMAND INFO get: Redis 7's ten fields.
    let info = val(
        &mut c,
        &["COMMAND", "INFO", "get", "nosuchcmd", "client|setname"],
    )
    .await;
    let info = array(&info);
    assert_eq!(info.len(), 3);
    let get = array(&info[0]);
    assert_eq!(get.len(), 10);
    assert_eq!(text(&get[0]), "get");
    assert_eq!(get[1], Value::Int(2));
    let flags = flag_names(&get[2]);
    assert!(
        flags.contains("readonly") && flags.contains("fast"),
        "{flags:?}"
    );
    assert_eq!(&get[3..6], &[Value::Int(1), Value::Int(1), Value::Int(1)]);
    let cats = flag_names(&get[6]);
    assert!(
        cats.contains("@read") && cats.contains("@string"),
        "{cats:?}"
    );
    assert_eq!(info[1], Value::Nil);
    let setname = array(&info[2]);
    assert_eq!(text(&setname[0]), "client|setname");
    assert_eq!(setname[1], Value::Int(3));

    // Key positions of the commands with keys.
    let info = val(&mut c, &["COMMAND", "INFO", "mset", "del", "ping"]).await;
    let info = array(&info);
    let triple = |e: &Value| array(e)[3..6].to_vec();
    assert_eq!(
        triple(&info[0]),
        [Value::Int(1), Value::Int(-1), Value::Int(2)]
    );
    assert_eq!(
        triple(&info[1]),
        [Value::Int(1), Value::Int(-1), Value::Int(1)]
    );
    assert_eq!(
        triple(&info[2]),
        [Value::Int(0), Value::Int(0), Value::Int(0)]
    );
    assert_eq!(array(&info[0])[1], Value::Int(-3));

    // COMMAND DOCS get: name, then its documentation map.
    let docs = pairs(&val(&mut c, &["COMMAND", "DOCS", "get"]).await);
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].0, "get");
    let doc: HashMap<String, Value> = pairs(&docs[0].1).into_iter().collect();
    assert_eq!(text(&doc["group"]), "string");
    assert_eq!(text(&doc["since"]), "1.0.0");
    assert!(!text(&doc["summary"]).is_empty());
    assert_eq!(text(&doc["complexity"]), "O(1)");

    assert_eq!(
        q_err(&mut c, &["COMMAND", "nope"]).await,
        "ERR unknown subcommand 'nope'. Try COMMAND HELP."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_getkeys() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let keys: Vec<String> = q(&mut c, &["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"]).await;
    assert_eq!(keys, ["a", "b"]);
    let keys: Vec<String> = q(&mut c, &["COMMAND", "GETKEYS", "SET", "k", "v", "EX", "5"]).await;
    assert_eq!(keys, ["k"]);
    let keys: Vec<String> = q(&mut c, &["COMMAND", "GETKEYS", "del", "x", "y", "z"]).await;
    assert_eq!(keys, ["x", "y", "z"]);
    assert_eq!(
        q_err(&mut c, &["COMMAND", "GETKEYS", "PING", "x"]).await,
        "ERR The command has no key arguments"
    );
    assert_eq!(
        q_err(&mut c, &["COMMAND", "GETKEYS", "nosuch", "x"]).await,
        "ERR Invalid command specified"
    );
    assert_eq!(
        q_err(&mut c, &["COMMAND", "GETKEYS", "GET"]).await,
        "ERR Invalid number of arguments specified for command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_get_and_set() {
    let srv = Server::start().await;
    let mut c = srv.client().await;

    let max = pairs(&val(&mut c, &["CONFIG", "GET", "*max*"]).await);
    let names: HashSet<&str> = max.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains("maxclients"), "{names:?}");
    assert!(names.contains("proto-max-bulk-len"), "{names:?}");
    assert!(names.iter().all(|n| n.contains("max")), "{names:?}");
    let maxclients = &max.iter().find(|(k, _)| k == "maxclients").unwrap().1;
    assert_eq!(text(maxclients), "10000");

    // What redis-benchmark asks for at start.
    let start = pairs(&val(&mut c, &["CONFIG", "GET", "save", "appendonly"]).await);
    let start: HashMap<_, _> = start.into_iter().map(|(k, v)| (k, text(&v))).collect();
    assert_eq!(start["save"], "");
    assert_eq!(start["appendonly"], "no");

    assert_eq!(
        pairs(&val(&mut c, &["CONFIG", "GET", "timeout"]).await)
            .into_iter()
            .map(|(k, v)| (k, text(&v)))
            .collect::<Vec<_>>(),
        [("timeout".to_string(), "0".to_string())]
    );
    assert_eq!(
        val(&mut c, &["CONFIG", "SET", "timeout", "5"]).await,
        Value::Okay
    );
    let got: Vec<String> = q(&mut c, &["CONFIG", "GET", "timeout"]).await;
    assert_eq!(got, ["timeout", "5"]);
    // Live: the server setting changed.
    assert_eq!(
        srv.state()
            .settings
            .timeout_secs
            .load(std::sync::atomic::Ordering::Relaxed),
        5
    );
    assert_eq!(
        val(&mut c, &["CONFIG", "SET", "timeout", "0"]).await,
        Value::Okay
    );

    let port: Vec<String> = q(&mut c, &["CONFIG", "GET", "port"]).await;
    assert_eq!(port, ["port", &srv.addr.port().to_string()]);
    let none: Vec<String> = q(&mut c, &["CONFIG", "GET", "no-such-param"]).await;
    assert!(none.is_empty());

    assert_eq!(
        q_err(&mut c, &["CONFIG", "SET", "no-such-param", "1"]).await,
        "ERR Unknown option or number of arguments for CONFIG SET - 'no-such-param'"
    );
    assert_eq!(
        q_err(&mut c, &["CONFIG", "SET", "timeout", "soon"]).await,
        "ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an integer"
    );
    assert_eq!(
        q_err(&mut c, &["CONFIG", "SET", "port", "1"]).await,
        "ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"
    );
    // Values Redis refuses are refused with its words: a tiny
    // proto-max-bulk-len or query buffer limit would lock every client out.
    for (name, value, range) in [
        ("proto-max-bulk-len", "0", "1048576 and 9223372036854775807"),
        ("proto-max-bulk-len", "1", "1048576 and 9223372036854775807"),
        (
            "client-query-buffer-limit",
            "0",
            "1048576 and 9223372036854775807",
        ),
        ("maxclients", "0", "1 and 4294967295"),
        ("timeout", "-1", "0 and 2147483647"),
        ("timeout", "2147483648", "0 and 2147483647"),
    ] {
        assert_eq!(
            q_err(&mut c, &["CONFIG", "SET", name, value]).await,
            format!("ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be between {range} inclusive")
        );
    }
    assert_eq!(
        q_err(&mut c, &["CONFIG", "SET", "timeout", "18446744073709551615"]).await,
        "ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an integer"
    );
    for (name, value) in [
        ("client-query-buffer-limit", "1048576"),
        ("maxclients", "1"),
        ("timeout", "2147483647"),
    ] {
        let ok: Value = q(&mut c, &["CONFIG", "SET", name, value]).await;
        assert_eq!(ok, Value::Okay, "{name} {value}");
    }
    let _: Value = q(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "timeout",
            "0",
            "maxclients",
            "10000",
            "client-query-buffer-limit",
            "1gb",
        ],
    )
    .await;
    // All or nothing: a bad pair leaves the good one unapplied.
    q_err(
        &mut c,
        &["CONFIG", "SET", "timeout", "7", "maxclients", "x"],
    )
    .await;
    let got: Vec<String> = q(&mut c, &["CONFIG", "GET", "timeout"]).await;
    assert_eq!(got, ["timeout", "0"]);
    assert_eq!(
        q_err(&mut c, &["CONFIG", "GET"]).await,
        "ERR wrong number of arguments for 'config|get' command"
    );
}

fn info_fields(info: &str) -> HashMap<String, String> {
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_sections_and_keyspace() {
    let srv = Server::start().await;
    let mut c = srv.client().await;

    let info: String = q(&mut c, &["INFO"]).await;
    for section in ["# Server", "# Clients", "# Memory", "# Stats", "# Keyspace"] {
        assert!(
            info.lines().any(|l| l == section),
            "INFO lacks {section}:\n{info}"
        );
    }
    assert!(info.contains("\r\n"), "INFO lines end in CRLF");
    let f = info_fields(&info);
    assert_eq!(f["redis_version"], turnstile::REDIS_VERSION);
    assert_eq!(f["tcp_port"], srv.addr.port().to_string());
    assert_eq!(f["server_time_usec"], (START_SECS * 1_000_000).to_string());
    assert_eq!(f["connected_clients"], "1");
    assert!(f.contains_key("used_memory"));
    assert!(f.contains_key("total_commands_processed"));
    assert!(!info.contains("db0:"), "empty keyspace has no db0 line");

    q::<()>(&mut c, &["MSET", "a", "1", "b", "2", "c", "3"]).await;
    q::<()>(&mut c, &["EXPIRE", "a", "100"]).await;
    let ks: String = q(&mut c, &["INFO", "keyspace"]).await;
    assert!(ks.starts_with("# Keyspace\r\n"), "{ks:?}");
    assert!(!ks.contains("# Server"), "{ks:?}");
    let db0 = info_fields(&ks)["db0"].clone();
    assert!(db0.starts_with("keys=3,expires=1,"), "{db0}");

    let srv_only: String = q(&mut c, &["INFO", "server", "clients"]).await;
    assert!(srv_only.contains("# Server") && srv_only.contains("# Clients"));
    assert!(!srv_only.contains("# Stats"));
}

/// INFO errorstats counts every error reply by its code (the text before
/// the first space, ERR without one), scripts' returned errors included;
/// commandstats tells requests refused before running (`rejected_calls`)
/// from calls that failed; INFO cpu reads getrusage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_errorstats_rejected_calls_and_cpu() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    q_err(&mut c, &["GET", "a", "b"]).await;
    q::<()>(&mut c, &["SET", "s", "x"]).await;
    q_err(&mut c, &["INCR", "s"]).await;
    q_err(&mut c, &["LPUSH", "s", "v"]).await;
    for script in [
        "return redis.error_reply('MY_ERR_CODE custom msg')",
        "return redis.error_reply('')",
    ] {
        q_err(&mut c, &["EVAL", script, "0"]).await;
    }

    let info: String = q(&mut c, &["INFO", "errorstats"]).await;
    assert!(info.starts_with("# Errorstats\r\n"), "{info:?}");
    let f = info_fields(&info);
    // GET's arity, INCR's not-an-integer, error_reply('')
    assert_eq!(f["errorstat_ERR"], "count=3", "{info}");
    assert_eq!(f["errorstat_WRONGTYPE"], "count=1", "{info}");
    assert_eq!(f["errorstat_MY_ERR_CODE"], "count=1", "{info}");
    let stats: String = q(&mut c, &["INFO", "stats"]).await;
    assert_eq!(info_fields(&stats)["total_error_replies"], "5");

    let cmds: String = q(&mut c, &["INFO", "commandstats"]).await;
    let f = info_fields(&cmds);
    assert_eq!(f["cmdstat_get"], "calls=0,rejected_calls=1,failed_calls=0");
    assert_eq!(f["cmdstat_incr"], "calls=1,rejected_calls=0,failed_calls=1");
    assert_eq!(f["cmdstat_eval"], "calls=2,rejected_calls=0,failed_calls=2");

    // Not in plain INFO; default has errorstats and cpu.
    let plain: String = q(&mut c, &["INFO"]).await;
    assert!(!plain.contains("rejected_calls"));
    assert!(plain.contains("# Errorstats\r\n") && plain.contains("# CPU\r\n"));
    let cpu: String = q(&mut c, &["INFO", "cpu"]).await;
    let f = info_fields(&cpu);
    for field in [
        "used_cpu_sys",
        "used_cpu_user",
        "used_cpu_sys_children",
        "used_cpu_user_children",
    ] {
        let v: f64 = f[field].parse().unwrap_or(-1.0);
        assert!(v >= 0.0, "{field}: {cpu}");
    }
    assert!(!cpu.contains("# Memory"), "{cpu}");

    q::<()>(&mut c, &["CONFIG", "RESETSTAT"]).await;
    let info: String = q(&mut c, &["INFO", "errorstats"]).await;
    assert_eq!(info, "# Errorstats\r\n");
}

// ---------------------------------------------------------------------------
// Keyspace and server commands
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dbsize_flushall_flushdb() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 0);
    q::<()>(&mut c, &["MSET", "a", "1", "b", "2", "c", "3"]).await;
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 3);
    assert_eq!(val(&mut c, &["FLUSHALL"]).await, Value::Okay);
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 0);
    assert_eq!(opt(&mut c, &["GET", "a"]).await, None);
    q::<()>(&mut c, &["MSET", "a", "1", "b", "2"]).await;
    assert_eq!(val(&mut c, &["FLUSHDB"]).await, Value::Okay);
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 0);
    q::<()>(&mut c, &["SET", "a", "1"]).await;
    assert_eq!(val(&mut c, &["FLUSHALL", "ASYNC"]).await, Value::Okay);
    assert_eq!(val(&mut c, &["FLUSHDB", "sync"]).await, Value::Okay);
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 0);
    assert_eq!(
        q_err(&mut c, &["FLUSHALL", "LATER"]).await,
        "ERR syntax error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_follows_the_manual_clock() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let t: Vec<String> = q(&mut c, &["TIME"]).await;
    assert_eq!(t, [START_SECS.to_string(), "0".to_string()]);
    srv.advance_ms(1_500);
    let t: Vec<String> = q(&mut c, &["TIME"]).await;
    assert_eq!(t, [(START_SECS + 1).to_string(), "500000".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn del_unlink_exists_type() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    q::<()>(&mut c, &["MSET", "a", "1", "b", "2", "c", "3", "d", "4"]).await;
    assert_eq!(int(&mut c, &["EXISTS", "a"]).await, 1);
    assert_eq!(int(&mut c, &["EXISTS", "a", "a", "b", "nope"]).await, 3);
    assert_eq!(
        val(&mut c, &["TYPE", "a"]).await,
        Value::SimpleString("string".into())
    );
    assert_eq!(
        val(&mut c, &["TYPE", "nope"]).await,
        Value::SimpleString("none".into())
    );
    assert_eq!(int(&mut c, &["DEL", "a", "b", "nope"]).await, 2);
    assert_eq!(int(&mut c, &["DEL", "a"]).await, 0);
    assert_eq!(int(&mut c, &["UNLINK", "c", "d", "c"]).await, 2);
    assert_eq!(int(&mut c, &["EXISTS", "a", "b", "c", "d"]).await, 0);
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 0);
    assert_eq!(
        q_err(&mut c, &["DEL"]).await,
        "ERR wrong number of arguments for 'del' command"
    );
    assert_eq!(
        q_err(&mut c, &["EXISTS"]).await,
        "ERR wrong number of arguments for 'exists' command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_and_pttl() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["TTL", "missing"]).await, -2);
    assert_eq!(int(&mut c, &["PTTL", "missing"]).await, -2);
    q::<()>(&mut c, &["SET", "k", "v"]).await;
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -1);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, -1);
    q::<()>(&mut c, &["SET", "k", "v", "EX", "100"]).await;
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 100_000);
    // TTL rounds to the nearest second, as Redis does.
    srv.advance_ms(400);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 99_600);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);
    srv.advance_ms(200);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 99_400);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_family_with_conditions() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["EXPIRE", "missing", "10"]).await, 0);

    q::<()>(&mut c, &["SET", "k", "v"]).await;
    // XX on a persistent key: no; NX: yes.
    assert_eq!(int(&mut c, &["EXPIRE", "k", "100", "XX"]).await, 0);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -1);
    assert_eq!(int(&mut c, &["EXPIRE", "k", "100", "NX"]).await, 1);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);
    assert_eq!(int(&mut c, &["EXPIRE", "k", "200", "NX"]).await, 0);
    assert_eq!(int(&mut c, &["EXPIRE", "k", "300", "XX"]).await, 1);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 300);
    // GT / LT compare with the current expiry.
    assert_eq!(int(&mut c, &["EXPIRE", "k", "100", "GT"]).await, 0);
    assert_eq!(int(&mut c, &["EXPIRE", "k", "400", "GT"]).await, 1);
    assert_eq!(int(&mut c, &["EXPIRE", "k", "500", "LT"]).await, 0);
    assert_eq!(int(&mut c, &["EXPIRE", "k", "50", "lt"]).await, 1);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 50);
    // A persistent key counts as an infinite TTL for GT and LT.
    q::<()>(&mut c, &["SET", "p", "v"]).await;
    assert_eq!(int(&mut c, &["EXPIRE", "p", "10", "GT"]).await, 0);
    assert_eq!(int(&mut c, &["TTL", "p"]).await, -1);
    assert_eq!(int(&mut c, &["EXPIRE", "p", "10", "LT"]).await, 1);
    assert_eq!(int(&mut c, &["TTL", "p"]).await, 10);

    // PEXPIRE, EXPIREAT, PEXPIREAT.
    assert_eq!(int(&mut c, &["PEXPIRE", "k", "1500"]).await, 1);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 1500);
    let at = (START_SECS + 100).to_string();
    assert_eq!(int(&mut c, &["EXPIREAT", "k", &at]).await, 1);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);
    let pat = (START_MS + 2_500).to_string();
    assert_eq!(int(&mut c, &["PEXPIREAT", "k", &pat]).await, 1);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 2_500);
    assert_eq!(int(&mut c, &["PEXPIREAT", "k", &pat, "NX"]).await, 0);

    // The deadline holds on the manual clock.
    srv.advance_ms(2_499);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 1);
    srv.advance_ms(1);
    assert_eq!(int(&mut c, &["EXISTS", "k"]).await, 0);
    assert_eq!(int(&mut c, &["EXPIRE", "k", "10"]).await, 0);

    // A time in the past deletes the key (and counts as set).
    for (i, args) in [
        vec!["EXPIRE", "x", "-1"],
        vec!["EXPIRE", "x", "0"],
        vec!["PEXPIRE", "x", "-100"],
        vec!["EXPIREAT", "x", "1000"],
        vec!["PEXPIREAT", "x", "1"],
    ]
    .into_iter()
    .enumerate()
    {
        q::<()>(&mut c, &["SET", "x", "v"]).await;
        assert_eq!(int(&mut c, &args).await, 1, "case {i}: {args:?}");
        assert_eq!(int(&mut c, &["EXISTS", "x"]).await, 0, "case {i}: {args:?}");
        assert_eq!(opt(&mut c, &["GET", "x"]).await, None);
        assert_eq!(int(&mut c, &["DEL", "x"]).await, 0);
    }
    // ... unless a condition refuses it.
    q::<()>(&mut c, &["SET", "x", "v", "EX", "100"]).await;
    assert_eq!(int(&mut c, &["EXPIRE", "x", "-1", "GT"]).await, 0);
    assert_eq!(int(&mut c, &["EXISTS", "x"]).await, 1);

    // Errors.
    assert_eq!(
        q_err(&mut c, &["EXPIRE", "x", "10", "NX", "XX"]).await,
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        q_err(&mut c, &["EXPIRE", "x", "10", "GT", "LT"]).await,
        "ERR GT and LT options at the same time are not compatible"
    );
    assert_eq!(
        q_err(&mut c, &["EXPIRE", "x", "10", "SOON"]).await,
        "ERR Unsupported option SOON"
    );
    assert_eq!(
        q_err(&mut c, &["EXPIRE", "x", "ten"]).await,
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        q_err(&mut c, &["EXPIRE", "x", "9223372036854775807"]).await,
        "ERR invalid expire time in 'expire' command"
    );
    assert_eq!(
        q_err(&mut c, &["PEXPIRE", "x", "9223372036854775807"]).await,
        "ERR invalid expire time in 'pexpire' command"
    );
    assert_eq!(
        int(&mut c, &["TTL", "x"]).await,
        100,
        "errors change nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persist() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["PERSIST", "missing"]).await, 0);
    q::<()>(&mut c, &["SET", "k", "v"]).await;
    assert_eq!(int(&mut c, &["PERSIST", "k"]).await, 0);
    q::<()>(&mut c, &["EXPIRE", "k", "10"]).await;
    assert_eq!(int(&mut c, &["PERSIST", "k"]).await, 1);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -1);
    srv.advance_ms(20_000);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("v"));
}

/// Walks SCAN to the end; returns every key and the number of calls.
async fn scan_all(c: &mut Con, extra: &[&str]) -> (Vec<String>, usize) {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    let mut calls = 0;
    loop {
        let mut args = vec!["SCAN", cursor.as_str()];
        args.extend_from_slice(extra);
        let (next, batch): (String, Vec<String>) = q(c, &args).await;
        calls += 1;
        keys.extend(batch);
        cursor = next;
        if cursor == "0" {
            return (keys, calls);
        }
        assert!(calls < 100_000, "SCAN never finished");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_returns_every_key_exactly_once() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let mut mset = redis::cmd("MSET");
    for i in 0..1000 {
        mset.arg(format!("key:{i}")).arg(i);
    }
    mset.query_async::<()>(&mut c).await.unwrap();
    // Expired keys are never returned.
    q::<()>(&mut c, &["SET", "gone", "v", "PX", "10"]).await;
    srv.advance_ms(10);

    let (keys, calls) = scan_all(&mut c, &["COUNT", "100"]).await;
    assert!(calls > 1, "1000 keys at COUNT 100 take more than one call");
    let unique: HashSet<&String> = keys.iter().collect();
    assert_eq!(keys.len(), 1000, "duplicates or misses");
    assert_eq!(unique.len(), 1000);
    let want: HashSet<String> = (0..1000).map(|i| format!("key:{i}")).collect();
    assert_eq!(unique, want.iter().collect());

    // Default COUNT too.
    let (keys, _) = scan_all(&mut c, &[]).await;
    assert_eq!(keys.into_iter().collect::<HashSet<_>>(), want);

    // MATCH filters (key:1, key:10..19, key:100..199).
    let (keys, _) = scan_all(&mut c, &["MATCH", "key:1*", "COUNT", "50"]).await;
    let got: HashSet<String> = keys.into_iter().collect();
    let want_1: HashSet<String> = want
        .iter()
        .filter(|k| k.starts_with("key:1"))
        .cloned()
        .collect();
    assert_eq!(want_1.len(), 111);
    assert_eq!(got, want_1);

    let (keys, _) = scan_all(&mut c, &["TYPE", "string", "MATCH", "key:99?"]).await;
    assert_eq!(keys.len(), 10);
    let (keys, _) = scan_all(&mut c, &["TYPE", "hash"]).await;
    assert!(keys.is_empty());

    assert_eq!(
        q_err(&mut c, &["SCAN", "0", "COUNT", "0"]).await,
        "ERR syntax error"
    );
    assert_eq!(
        q_err(&mut c, &["SCAN", "0", "MATCH"]).await,
        "ERR syntax error"
    );
    assert_eq!(q_err(&mut c, &["SCAN", "zero"]).await, "ERR invalid cursor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_patterns() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    q::<()>(
        &mut c,
        &[
            "MSET", "user:1", "a", "user:2", "b", "user:10", "c", "hello", "x", "hallo", "y",
            "hxllo", "z",
        ],
    )
    .await;
    q::<()>(&mut c, &["SET", "user:expired", "v", "PX", "5"]).await;
    srv.advance_ms(5);
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let got: Vec<String> = q(&mut c, &["KEYS", "user:*"]).await;
    assert_eq!(sorted(got), ["user:1", "user:10", "user:2"]);
    let got: Vec<String> = q(&mut c, &["KEYS", "user:?"]).await;
    assert_eq!(sorted(got), ["user:1", "user:2"]);
    let got: Vec<String> = q(&mut c, &["KEYS", "h[ae]llo"]).await;
    assert_eq!(sorted(got), ["hallo", "hello"]);
    let got: Vec<String> = q(&mut c, &["KEYS", "h[^e]llo"]).await;
    assert_eq!(sorted(got), ["hallo", "hxllo"]);
    let got: Vec<String> = q(&mut c, &["KEYS", "*"]).await;
    assert_eq!(got.len(), 6);
    let got: Vec<String> = q(&mut c, &["KEYS", "nomatch*"]).await;
    assert!(got.is_empty());
}

// ---------------------------------------------------------------------------
// String commands
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_set_with_every_option() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(opt(&mut c, &["GET", "k"]).await, None);
    assert_eq!(val(&mut c, &["SET", "k", "v"]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("v"));
    // Binary-safe values, and long ones (past any inline small-string size).
    let long = "x".repeat(10_000);
    q::<()>(&mut c, &["SET", "long", &long]).await;
    assert_eq!(opt(&mut c, &["GET", "long"]).await, Some(long));
    let bin: Vec<u8> = (0..=255u8).collect();
    redis::cmd("SET")
        .arg("bin")
        .arg(&bin)
        .query_async::<()>(&mut c)
        .await
        .unwrap();
    let got: Vec<u8> = q(&mut c, &["GET", "bin"]).await;
    assert_eq!(got, bin);

    // EX / PX / EXAT / PXAT.
    q::<()>(&mut c, &["SET", "k", "v", "EX", "10"]).await;
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 10);
    q::<()>(&mut c, &["SET", "k", "v", "px", "1500"]).await;
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 1500);
    let exat = (START_SECS + 20).to_string();
    q::<()>(&mut c, &["SET", "k", "v", "EXAT", &exat]).await;
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 20);
    let pxat = (START_MS + 2_500).to_string();
    q::<()>(&mut c, &["SET", "k", "v", "PXAT", &pxat]).await;
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 2_500);
    // An absolute time already past: OK, and the key reads as absent.
    assert_eq!(
        val(&mut c, &["SET", "past", "v", "EXAT", "1000"]).await,
        Value::Okay
    );
    assert_eq!(int(&mut c, &["EXISTS", "past"]).await, 0);

    // A plain SET clears the TTL; KEEPTTL keeps it.
    q::<()>(&mut c, &["SET", "k", "v", "EX", "100"]).await;
    q::<()>(&mut c, &["SET", "k", "v2", "KEEPTTL"]).await;
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 100);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("v2"));
    q::<()>(&mut c, &["SET", "k", "v3"]).await;
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -1);

    // NX / XX.
    assert_eq!(val(&mut c, &["SET", "k", "nx", "NX"]).await, Value::Nil);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("v3"));
    assert_eq!(val(&mut c, &["SET", "new", "nx", "NX"]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["GET", "new"]).await.as_deref(), Some("nx"));
    assert_eq!(
        val(&mut c, &["SET", "absent", "xx", "XX"]).await,
        Value::Nil
    );
    assert_eq!(int(&mut c, &["EXISTS", "absent"]).await, 0);
    assert_eq!(val(&mut c, &["SET", "k", "xx", "XX"]).await, Value::Okay);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("xx"));
    // NX treats an expired key as absent.
    q::<()>(&mut c, &["SET", "ephemeral", "old", "PX", "100"]).await;
    srv.advance_ms(100);
    assert_eq!(
        val(&mut c, &["SET", "ephemeral", "fresh", "NX"]).await,
        Value::Okay
    );
    assert_eq!(int(&mut c, &["TTL", "ephemeral"]).await, -1);

    // GET returns the old value.
    assert_eq!(
        opt(&mut c, &["SET", "k", "g1", "GET"]).await.as_deref(),
        Some("xx")
    );
    assert_eq!(opt(&mut c, &["SET", "fresh", "g", "GET"]).await, None);
    assert_eq!(opt(&mut c, &["GET", "fresh"]).await.as_deref(), Some("g"));
    // NX with GET: returns the old value and does not write (Redis 7).
    assert_eq!(
        opt(&mut c, &["SET", "k", "nope", "NX", "GET"])
            .await
            .as_deref(),
        Some("g1")
    );
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("g1"));
    assert_eq!(
        opt(&mut c, &["SET", "k", "g2", "GET", "EX", "30"])
            .await
            .as_deref(),
        Some("g1")
    );
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 30);

    // Errors, word for word; none changes the key.
    for (args, want) in [
        (
            vec!["SET", "k", "v", "EX", "1", "PX", "1"],
            "ERR syntax error",
        ),
        (vec!["SET", "k", "v", "NX", "XX"], "ERR syntax error"),
        (
            vec!["SET", "k", "v", "KEEPTTL", "EX", "1"],
            "ERR syntax error",
        ),
        (
            vec!["SET", "k", "v", "EX", "1", "KEEPTTL"],
            "ERR syntax error",
        ),
        (vec!["SET", "k", "v", "EX"], "ERR syntax error"),
        (vec!["SET", "k", "v", "BOGUS"], "ERR syntax error"),
        (
            vec!["SET", "k", "v", "EX", "0"],
            "ERR invalid expire time in 'set' command",
        ),
        (
            vec!["SET", "k", "v", "PX", "-5"],
            "ERR invalid expire time in 'set' command",
        ),
        (
            vec!["SET", "k", "v", "EX", "9223372036854775807"],
            "ERR invalid expire time in 'set' command",
        ),
        (
            vec!["SET", "k", "v", "PX", "9223372036854775807"],
            "ERR invalid expire time in 'set' command",
        ),
        (
            vec!["SET", "k", "v", "EX", "soon"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec!["SET", "k"],
            "ERR wrong number of arguments for 'set' command",
        ),
    ] {
        assert_eq!(q_err(&mut c, &args).await, want, "{args:?}");
    }
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("g2"));
    assert_eq!(int(&mut c, &["TTL", "k"]).await, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mget_and_mset() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(
        val(&mut c, &["MSET", "a", "1", "b", "2"]).await,
        Value::Okay
    );
    let got: Vec<Option<String>> = q(&mut c, &["MGET", "a", "missing", "b", "a"]).await;
    assert_eq!(
        got,
        [Some("1".into()), None, Some("2".into()), Some("1".into())]
    );
    // MSET overwrites and clears a TTL.
    q::<()>(&mut c, &["SET", "a", "old", "EX", "100"]).await;
    q::<()>(&mut c, &["MSET", "a", "new", "a", "newer"]).await;
    assert_eq!(opt(&mut c, &["GET", "a"]).await.as_deref(), Some("newer"));
    assert_eq!(int(&mut c, &["TTL", "a"]).await, -1);
    assert_eq!(
        q_err(&mut c, &["MSET", "a", "1", "b"]).await,
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(
        q_err(&mut c, &["MSET", "a"]).await,
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(opt(&mut c, &["GET", "b"]).await.as_deref(), Some("2"));
    assert_eq!(
        q_err(&mut c, &["MGET"]).await,
        "ERR wrong number of arguments for 'mget' command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incr_family() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["INCR", "n"]).await, 1);
    assert_eq!(int(&mut c, &["INCRBY", "n", "10"]).await, 11);
    assert_eq!(int(&mut c, &["DECR", "n"]).await, 10);
    assert_eq!(int(&mut c, &["DECRBY", "n", "15"]).await, -5);
    assert_eq!(int(&mut c, &["INCRBY", "n", "-3"]).await, -8);
    assert_eq!(opt(&mut c, &["GET", "n"]).await.as_deref(), Some("-8"));
    assert_eq!(int(&mut c, &["DECR", "fresh"]).await, -1);
    assert_eq!(int(&mut c, &["DECRBY", "fresh2", "-4"]).await, 4);

    // INCR keeps the TTL (fixed-window limiters rely on it).
    q::<()>(&mut c, &["SET", "win", "5", "EX", "60"]).await;
    assert_eq!(int(&mut c, &["INCR", "win"]).await, 6);
    assert_eq!(int(&mut c, &["TTL", "win"]).await, 60);
    // An expired counter starts over, with no TTL.
    srv.advance_ms(60_000);
    assert_eq!(int(&mut c, &["INCR", "win"]).await, 1);
    assert_eq!(int(&mut c, &["TTL", "win"]).await, -1);

    // Overflow, both ways; the value is unchanged.
    q::<()>(&mut c, &["SET", "max", "9223372036854775807"]).await;
    assert_eq!(
        q_err(&mut c, &["INCR", "max"]).await,
        "ERR increment or decrement would overflow"
    );
    assert_eq!(
        q_err(&mut c, &["INCRBY", "max", "1"]).await,
        "ERR increment or decrement would overflow"
    );
    assert_eq!(
        opt(&mut c, &["GET", "max"]).await.as_deref(),
        Some("9223372036854775807")
    );
    q::<()>(&mut c, &["SET", "min", "-9223372036854775808"]).await;
    assert_eq!(
        q_err(&mut c, &["DECR", "min"]).await,
        "ERR increment or decrement would overflow"
    );
    assert_eq!(
        q_err(&mut c, &["DECRBY", "n", "-9223372036854775808"]).await,
        "ERR decrement would overflow"
    );

    // Not integers.
    for args in [
        vec!["INCRBY", "n", "abc"],
        vec!["INCRBY", "n", "1.5"],
        vec!["DECRBY", "n", "9223372036854775808"],
    ] {
        assert_eq!(
            q_err(&mut c, &args).await,
            "ERR value is not an integer or out of range",
            "{args:?}"
        );
    }
    for value in ["hello", " 1", "007", "1.0", "", "99999999999999999999"] {
        q::<()>(&mut c, &["SET", "s", value]).await;
        assert_eq!(
            q_err(&mut c, &["INCR", "s"]).await,
            "ERR value is not an integer or out of range",
            "INCR on {value:?}"
        );
        assert_eq!(opt(&mut c, &["GET", "s"]).await.as_deref(), Some(value));
    }
    assert_eq!(int(&mut c, &["GET", "n"]).await, -8);
}

// ---------------------------------------------------------------------------
// Expiry on the manual clock
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn px_expiry_to_the_millisecond_then_sweep() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    q::<()>(&mut c, &["SET", "k", "v", "PX", "1000"]).await;
    srv.advance_ms(999);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, 1);
    assert_eq!(opt(&mut c, &["GET", "k"]).await.as_deref(), Some("v"));
    assert_eq!(int(&mut c, &["EXISTS", "k"]).await, 1);
    srv.advance_ms(1);
    assert_eq!(opt(&mut c, &["GET", "k"]).await, None);
    assert_eq!(int(&mut c, &["EXISTS", "k"]).await, 0);
    assert_eq!(int(&mut c, &["TTL", "k"]).await, -2);
    assert_eq!(int(&mut c, &["PTTL", "k"]).await, -2);
    assert_eq!(
        val(&mut c, &["TYPE", "k"]).await,
        Value::SimpleString("none".into())
    );
    let swept = srv.sweep();
    assert!(
        swept <= 1,
        "at most the one key (the background sweeper may win)"
    );
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 0);
    let info: String = q(&mut c, &["INFO", "stats"]).await;
    let expired: u64 = info_fields(&info)["expired_keys"].parse().unwrap();
    assert_eq!(expired, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_expire_and_sweep_away() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let mut p = redis::pipe();
    for i in 0..500 {
        // Half expire after 1 s, half after 2 s.
        p.cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .arg("PX")
            .arg(1000 + (i % 2) * 1000)
            .ignore();
    }
    p.query_async::<()>(&mut c).await.unwrap();
    q::<()>(&mut c, &["SET", "forever", "1"]).await;
    srv.advance_ms(1000);
    let keys: Vec<String> = q(&mut c, &["KEYS", "k*"]).await;
    assert_eq!(keys.len(), 250);
    srv.sweep();
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 251);
    srv.advance_ms(1000);
    srv.sweep();
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 1);
    let ks: String = q(&mut c, &["INFO", "keyspace"]).await;
    assert!(ks.contains("db0:keys=1,expires=0,"), "{ks}");
}

// ---------------------------------------------------------------------------
// Errors, word for word
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_word_for_word() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    assert_eq!(
        q_err(&mut c, &["foo", "bar"]).await,
        "ERR unknown command 'foo', with args beginning with: 'bar' "
    );
    assert_eq!(
        q_err(&mut c, &["FOO"]).await,
        "ERR unknown command 'FOO', with args beginning with: "
    );
    assert_eq!(
        q_err(&mut c, &["foo", "a", "b c"]).await,
        "ERR unknown command 'foo', with args beginning with: 'a' 'b c' "
    );
    assert_eq!(
        q_err(&mut c, &["GET"]).await,
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        q_err(&mut c, &["get", "a", "b"]).await,
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        q_err(&mut c, &["CLIENT", "SETNAME"]).await,
        "ERR wrong number of arguments for 'client|setname' command"
    );
    assert_eq!(
        q_err(&mut c, &["CLIENT"]).await,
        "ERR wrong number of arguments for 'client' command"
    );
    assert_eq!(
        q_err(&mut c, &["CLIENT", "nope"]).await,
        "ERR unknown subcommand 'nope'. Try CLIENT HELP."
    );
    assert_eq!(
        q_err(&mut c, &["INCRBY", "k", "abc"]).await,
        "ERR value is not an integer or out of range"
    );
    q::<()>(&mut c, &["SET", "text", "abc"]).await;
    assert_eq!(
        q_err(&mut c, &["INCR", "text"]).await,
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        q_err(&mut c, &["SET", "k", "v", "EX", "1", "PX", "1"]).await,
        "ERR syntax error"
    );
    assert_eq!(
        q_err(&mut c, &["SET", "k", "v", "EX", "0"]).await,
        "ERR invalid expire time in 'set' command"
    );
    q::<()>(&mut c, &["SET", "big", "9223372036854775807"]).await;
    assert_eq!(
        q_err(&mut c, &["INCR", "big"]).await,
        "ERR increment or decrement would overflow"
    );
    // A long unknown command's arguments are cut near 128 bytes.
    let long = "z".repeat(300);
    let e = q_err(&mut c, &["nope", &long]).await;
    assert_eq!(
        e,
        format!(
            "ERR unknown command 'nope', with args beginning with: '{}' ",
            "z".repeat(128)
        )
    );
    // The connection is fine after all that.
    assert_pong(&mut c).await;
}

// ---------------------------------------------------------------------------
// RESP3 shapes through the client
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_types_through_the_client() {
    let srv = Server::start().await;
    let mut c3 = srv.client3().await;
    let mut c2 = srv.client().await;

    assert_eq!(val(&mut c3, &["GET", "missing"]).await, Value::Nil);
    assert_eq!(val(&mut c2, &["GET", "missing"]).await, Value::Nil);

    let cfg3 = val(&mut c3, &["CONFIG", "GET", "timeout"]).await;
    assert!(
        matches!(&cfg3, Value::Map(m) if m.len() == 1),
        "RESP3 CONFIG GET is a map: {cfg3:?}"
    );
    let cfg2 = val(&mut c2, &["CONFIG", "GET", "timeout"]).await;
    assert!(
        matches!(&cfg2, Value::Array(a) if a.len() == 2),
        "RESP2 CONFIG GET is a flat array: {cfg2:?}"
    );
    assert_eq!(pairs(&cfg3), pairs(&cfg2));

    let info3 = val(&mut c3, &["INFO", "server"]).await;
    assert!(matches!(info3, Value::VerbatimString { .. }), "{info3:?}");
    assert!(text(&info3).contains("redis_version:"));
    let info2 = val(&mut c2, &["INFO", "server"]).await;
    assert!(matches!(info2, Value::BulkString(_)), "{info2:?}");

    let ci = val(&mut c3, &["CLIENT", "INFO"]).await;
    assert!(text(&ci).contains(" resp=3 "), "{ci:?}");

    // Flags are sets in RESP3.
    let info = val(&mut c3, &["COMMAND", "INFO", "get"]).await;
    let entry = array(&array(&info)[0]).to_vec();
    assert!(matches!(entry[2], Value::Set(_)), "{:?}", entry[2]);

    let got: Vec<Option<String>> = q(&mut c3, &["MGET", "missing", "x"]).await;
    assert_eq!(got, [None, None]);
    q::<()>(&mut c3, &["SET", "x", "1"]).await;
    assert_eq!(int(&mut c3, &["INCR", "x"]).await, 2);
    assert_eq!(opt(&mut c3, &["GET", "x"]).await.as_deref(), Some("2"));
    assert_eq!(
        q_err(&mut c3, &["GET"]).await,
        "ERR wrong number of arguments for 'get' command"
    );
}

// ---------------------------------------------------------------------------
// Pipelines
// ---------------------------------------------------------------------------

async fn big_pipeline(c: &mut Con) {
    const N: usize = 10_000;
    let mut p = redis::pipe();
    let mut want = Vec::with_capacity(N);
    let mut counter = 0;
    for i in 0..N {
        match i % 3 {
            0 => {
                p.cmd("SET").arg(format!("s:{i}")).arg(format!("v{i}"));
                want.push(Value::Okay);
            }
            1 => {
                p.cmd("INCR").arg("ctr");
                counter += 1;
                want.push(Value::Int(counter));
            }
            _ => {
                p.cmd("GET").arg(format!("s:{}", i - 2));
                want.push(Value::BulkString(format!("v{}", i - 2).into_bytes()));
            }
        }
    }
    let got: Vec<Value> = p.query_async(c).await.expect("pipeline");
    assert_eq!(got.len(), N);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "reply {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_of_10000_commands_resp2_and_resp3() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    big_pipeline(&mut c).await;
    // i % 3 == 1 for 3333 of the 10 000.
    assert_eq!(int(&mut c, &["GET", "ctr"]).await, 3333);
    q::<()>(&mut c, &["FLUSHALL"]).await;
    let mut c3 = srv.client3().await;
    big_pipeline(&mut c3).await;
    // 3334 SET keys (i % 3 == 0) plus the counter.
    assert_eq!(int(&mut c3, &["DBSIZE"]).await, 3334 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_share_one_keyspace() {
    let srv = Server::start().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut c = srv.client().await;
        tasks.push(tokio::spawn(async move {
            let mut p = redis::pipe();
            for _ in 0..500 {
                p.cmd("INCR").arg("shared").ignore();
            }
            p.query_async::<()>(&mut c).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut c = srv.client().await;
    assert_eq!(int(&mut c, &["GET", "shared"]).await, 4000);
}

/// Keys and values on both sides of the store's inline-bytes limit, empty
/// and binary ones included, read back intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_values_of_every_small_length() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let mut p = redis::pipe();
    for len in 0..=48usize {
        let key: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
        let value: Vec<u8> = (0..len).map(|i| (255 - i % 256) as u8).collect();
        p.cmd("SET").arg(&key).arg(&value).ignore();
    }
    p.query_async::<()>(&mut c).await.unwrap();
    assert_eq!(int(&mut c, &["DBSIZE"]).await, 49);
    for len in 0..=48usize {
        let key: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
        let value: Vec<u8> = (0..len).map(|i| (255 - i % 256) as u8).collect();
        let got: Vec<u8> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(got, value, "key of {len} bytes");
        let n: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    // Binary keys come back from SCAN byte for byte.
    let (cursor, keys): (String, Vec<Vec<u8>>) = q(&mut c, &["SCAN", "0", "COUNT", "1000"]).await;
    assert_eq!(cursor, "0");
    let keys: HashSet<Vec<u8>> = keys.into_iter().collect();
    assert_eq!(keys.len(), 49);
    for len in 0..=48usize {
        let key: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
        assert!(keys.contains(&key), "SCAN lacks the {len}-byte key");
    }
    let n: i64 = redis::cmd("DEL")
        .arg(b"")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(n, 1, "the empty key is a key");
}

/// Every setting `CONFIG SET` changes accepts there exactly what its
/// start-up flag accepts, over values of every form (numbers at and past
/// the ends of ranges, sizes, yes/no, names, output limits): the two
/// paths are walked for real, the server's `CONFIG SET` and the flags'
/// parser, and each accepted change is put back.
#[tokio::test]
async fn config_set_and_the_flags_accept_the_same_values() {
    let dir = std::env::temp_dir().join(format!("turnstile-config-walk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let snapshot = dir.join("dump.tsnap");
    let srv = Server::start_with(|c| {
        c.snapshot = Some(snapshot.clone());
        c.snapshot_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut r = srv.raw().await;
    let values = [
        "",
        "0",
        "1",
        "-1",
        "100",
        "1023",
        "16383",
        "16384",
        "65535",
        "65536",
        "1048575",
        "1048576",
        "2147483647",
        "2147483648",
        "4294967295",
        "4294967296",
        "1kb",
        "1mb",
        "1gb",
        "2gb",
        "12zz",
        "yes",
        "no",
        "YES",
        "maybe",
        "always",
        "everysec",
        "never",
        "noeviction",
        "volatile-ttl",
        "allkeys-lru",
        "0 0 0",
        "normal 1mb 1mb 1",
        "replica 256mb 64mb 60",
        "replica 1mb",
        "pubsub 1mb 1mb 1",
    ];
    let settable = turnstile::cmd::admin::config::settable();
    let mut walked = 0;
    for name in settable {
        // Aliases and secrets: no flag of that name, or any text goes.
        if matches!(
            name,
            "busy-reply-threshold" | "requirepass" | "masterauth" | "masteruser"
        ) {
            continue;
        }
        let before = r.call(&["CONFIG", "GET", name]).await;
        let before = before.lines().nth(4).unwrap_or("").to_string();
        for v in values {
            let set = r.call(&["CONFIG", "SET", name, v]).await;
            let at_runtime = set == "+OK\r\n";
            if at_runtime {
                let back = r.call(&["CONFIG", "SET", name, &before]).await;
                assert_eq!(back, "+OK\r\n", "{name} back to {before:?}");
            }
            let flag = format!("--{name}={v}");
            let at_start = turnstile::config::Config::parse_from(["turnstile", &flag]).is_ok();
            assert_eq!(
                at_start,
                at_runtime,
                "{flag} at start-up against CONFIG SET {name} {v:?} ({})",
                set.trim_end()
            );
        }
        walked += 1;
    }
    assert!(walked >= 25, "{walked} settings walked");
    srv.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
