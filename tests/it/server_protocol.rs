//! The wire: exact reply bytes (RESP2 and RESP3), inline commands, raw
//! pipelines, and malformed input that must get Redis's protocol error and a
//! closed connection without disturbing anyone else.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::*;
use tokio::io::AsyncWriteExt;

// ---------------------------------------------------------------------------
// Exact replies
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_reply_bytes_resp2() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["PING"]).await, "+PONG\r\n");
    assert_eq!(r.call(&["PING", "hi"]).await, "$2\r\nhi\r\n");
    assert_eq!(r.call(&["ECHO", ""]).await, "$0\r\n\r\n");
    assert_eq!(r.call(&["GET", "missing"]).await, "$-1\r\n");
    assert_eq!(r.call(&["SET", "k", "v"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "k", "v", "NX"]).await, "$-1\r\n");
    assert_eq!(r.call(&["GET", "k"]).await, "$1\r\nv\r\n");
    assert_eq!(r.call(&["INCR", "n"]).await, ":1\r\n");
    assert_eq!(
        r.call(&["MGET", "k", "missing"]).await,
        "*2\r\n$1\r\nv\r\n$-1\r\n"
    );
    assert_eq!(r.call(&["TYPE", "k"]).await, "+string\r\n");
    assert_eq!(
        r.call(&["TIME"]).await,
        format!("*2\r\n$10\r\n{START_SECS}\r\n$1\r\n0\r\n")
    );
    assert_eq!(
        r.call(&["CONFIG", "GET", "timeout"]).await,
        "*2\r\n$7\r\ntimeout\r\n$1\r\n0\r\n"
    );
    assert_eq!(
        r.call(&["SCAN", "0", "MATCH", "zz*", "COUNT", "100000"])
            .await,
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
    assert_eq!(r.call(&["CLIENT", "GETNAME"]).await, "$-1\r\n");
    assert_eq!(
        r.call(&["COMMAND", "INFO", "nosuch"]).await,
        "*1\r\n$-1\r\n"
    );
    assert_eq!(
        r.call(&["foo", "bar"]).await,
        "-ERR unknown command 'foo', with args beginning with: 'bar' \r\n"
    );
    assert_eq!(
        r.call(&["GET"]).await,
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        r.call(&["CLIENT", "SETNAME"]).await,
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(
        r.call(&["CLIENT", "nope"]).await,
        "-ERR unknown subcommand 'nope'. Try CLIENT HELP.\r\n"
    );
    assert_eq!(
        r.call(&["INCRBY", "k", "abc"]).await,
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        r.call(&["SET", "k", "v", "EX", "1", "PX", "1"]).await,
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        r.call(&["SET", "k", "v", "EX", "0"]).await,
        "-ERR invalid expire time in 'set' command\r\n"
    );
    // An error message never carries a raw CR or LF.
    assert_eq!(
        r.call(&["nope\r\nx"]).await,
        "-ERR unknown command 'nope  x', with args beginning with: \r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_3_switches_the_wire_to_resp3() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    let id = r.call(&["CLIENT", "ID"]).await;
    let id = id.trim_start_matches(':').trim_end();

    let hello2 = r.call(&["HELLO", "2"]).await;
    assert!(
        hello2.starts_with("*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
        "{hello2:?}"
    );

    let hello3 = r.call(&["HELLO", "3"]).await;
    let v = turnstile::REDIS_VERSION;
    assert_eq!(
        hello3,
        format!(
            "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n${}\r\n{v}\r\n\
             $5\r\nproto\r\n:3\r\n$2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
             $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
            v.len()
        )
    );
    assert_eq!(r.call(&["GET", "missing"]).await, "_\r\n");
    assert_eq!(r.call(&["MGET", "missing"]).await, "*1\r\n_\r\n");
    assert_eq!(r.call(&["CLIENT", "GETNAME"]).await, "_\r\n");
    assert_eq!(r.call(&["COMMAND", "INFO", "nosuch"]).await, "*1\r\n_\r\n");
    assert_eq!(
        r.call(&["CONFIG", "GET", "timeout"]).await,
        "%1\r\n$7\r\ntimeout\r\n$1\r\n0\r\n"
    );
    let info = r.call(&["INFO", "server"]).await;
    assert!(info.starts_with('='), "INFO is verbatim in RESP3: {info:?}");
    assert!(info.contains("\r\ntxt:# Server\r\n"), "{info:?}");
    // Back to RESP2 on the same connection.
    assert!(r.call(&["HELLO", "2"]).await.starts_with("*14\r\n"));
    assert_eq!(r.call(&["GET", "missing"]).await, "$-1\r\n");
    assert_eq!(
        r.call(&["HELLO", "4"]).await,
        "-NOPROTO unsupported protocol version\r\n"
    );
    // RESET returns to RESP2 too.
    r.call(&["HELLO", "3"]).await;
    assert_eq!(r.call(&["RESET"]).await, "+RESET\r\n");
    assert_eq!(r.call(&["GET", "missing"]).await, "$-1\r\n");
}

// ---------------------------------------------------------------------------
// Inline commands
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_commands() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    assert_eq!(r.roundtrip(b"PING\r\n").await, "+PONG\r\n");
    assert_eq!(r.roundtrip(b"ping\n").await, "+PONG\r\n");
    assert_eq!(r.roundtrip(b"SET a \"b c\"\r\n").await, "+OK\r\n");
    assert_eq!(r.roundtrip(b"  ECHO   'x y'  \r\n").await, "$3\r\nx y\r\n");
    assert_eq!(r.roundtrip(b"ECHO \"\\x41\\n\"\r\n").await, "$2\r\nA\n\r\n");
    assert_eq!(r.roundtrip(b"GET a\r\n").await, "$3\r\nb c\r\n");
    // A redis-crate client sees what the inline SET wrote.
    let mut c = srv.client().await;
    let got: String = q(&mut c, &["GET", "a"]).await;
    assert_eq!(got, "b c");
    // Empty lines and empty or negative multibulk counts are skipped.
    assert_eq!(r.roundtrip(b"\r\n\n   \r\nPING\r\n").await, "+PONG\r\n");
    assert_eq!(r.roundtrip(b"*-10\r\nPING\r\n").await, "+PONG\r\n");
    assert_eq!(
        r.roundtrip(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n").await,
        "+PONG\r\n"
    );
    assert_eq!(
        r.call(&["ECHO", "still open"]).await,
        "$10\r\nstill open\r\n"
    );
}

/// `\r\n` alone gets no reply at all: the next reply is the PING's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_line_gets_no_reply() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    r.send(b"\r\n").await;
    r.send(b"*-10\r\n").await;
    r.send(b"PING\r\n").await;
    assert_eq!(r.reply_text().await, "+PONG\r\n");
    assert_eq!(r.call(&["ECHO", "next"]).await, "$4\r\nnext\r\n");
}

/// A request split at every byte boundary decodes the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_dribbled_byte_by_byte() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    let mut wire = encode_words(&["SET", "dribble", "some value"]);
    wire.extend_from_slice(b"ECHO \"in line\"\r\n");
    wire.extend_from_slice(&encode_words(&["GET", "dribble"]));
    for b in &wire {
        r.send(std::slice::from_ref(b)).await;
        r.stream.flush().await.unwrap();
    }
    assert_eq!(r.reply_text().await, "+OK\r\n");
    assert_eq!(r.reply_text().await, "$7\r\nin line\r\n");
    assert_eq!(r.reply_text().await, "$10\r\nsome value\r\n");
}

// ---------------------------------------------------------------------------
// Raw pipelines
// ---------------------------------------------------------------------------

async fn pipelined_pings(r: &mut Raw, one: &[u8]) {
    const N: usize = 10_000;
    let wire = one.repeat(N);
    let want = b"+PONG\r\n".repeat(N);
    let (mut rd, mut wr) = r.stream.split();
    let write = async {
        tokio::time::timeout(IO_TIMEOUT, wr.write_all(&wire))
            .await
            .expect("write in time")
            .expect("write");
    };
    let read = async {
        use tokio::io::AsyncReadExt;
        let mut got = vec![0u8; want.len()];
        tokio::time::timeout(IO_TIMEOUT, rd.read_exact(&mut got))
            .await
            .expect("10 000 replies in time")
            .expect("read");
        got
    };
    let ((), got) = tokio::join!(write, read);
    assert!(got == want, "replies are not 10 000 +PONG");
    // Nothing more: the next reply is the ECHO's.
    assert_eq!(r.call(&["ECHO", "end"]).await, "$3\r\nend\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_pipeline_of_10000_pings_in_one_write() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    pipelined_pings(&mut r, b"*1\r\n$4\r\nPING\r\n").await;
    pipelined_pings(&mut r, b"PING\r\n").await;
    let stats = srv
        .state()
        .stats
        .counters
        .get(turnstile::metrics::table::COMMANDS_PROCESSED);
    assert!(stats >= 20_002, "commands_processed = {stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_pipeline_of_mixed_commands() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for i in 0..3000 {
        wire.extend(encode_words(&["SET", &format!("k{i}"), &i.to_string()]));
        want.extend_from_slice(b"+OK\r\n");
        wire.extend(encode_words(&["INCR", &format!("k{i}")]));
        want.extend(format!(":{}\r\n", i + 1).into_bytes());
        wire.extend(format!("GET k{i}\r\n").into_bytes());
        let v = (i + 1).to_string();
        want.extend(format!("${}\r\n{v}\r\n", v.len()).into_bytes());
    }
    r.send(&wire).await;
    let got = r.read_exact(want.len()).await;
    assert!(got == want, "mixed pipeline replies differ");
}

// ---------------------------------------------------------------------------
// Malformed input
// ---------------------------------------------------------------------------

/// Sends `input` on a fresh raw connection; returns everything the server
/// sent before closing it (it must close).
async fn send_until_closed(srv: &Server, input: &[u8]) -> String {
    let mut r = srv.raw().await;
    // The server may close (and reset) while the tail is still being sent.
    let _ = r.try_send(input).await;
    String::from_utf8_lossy(&r.read_until_closed().await).into_owned()
}

/// The input's error reply is one error line ending in `Protocol error:
/// {why}`, and the server closes the connection after it.
///
/// The `ERR ` prefix Redis puts first is checked separately, in
/// `protocol_errors_carry_the_err_prefix` (the server currently omits it).
async fn protocol_error(srv: &Server, input: &[u8], why: &str) {
    let got = send_until_closed(srv, input).await;
    let ok = got.starts_with('-')
        && got.ends_with(&format!("Protocol error: {why}\r\n"))
        && got.matches("\r\n").count() == 1;
    assert!(
        ok,
        "input {:?}: got {got:?}, want the error line ending in {why:?}",
        String::from_utf8_lossy(&input[..input.len().min(60)])
    );
}

/// The malformed cases, with the reason Redis gives for each.
fn malformed_cases() -> Vec<(Vec<u8>, &'static str)> {
    vec![
        (b"*20000000\r\n".to_vec(), "invalid multibulk length"),
        (b"*1\r\n$-10\r\n".to_vec(), "invalid bulk length"),
        (b"*1\r\n$2000000000\r\n".to_vec(), "invalid bulk length"),
        (b"*1\r\n$blabla\r\n".to_vec(), "invalid bulk length"),
        (
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n".to_vec(),
            "expected '$', got 'f'",
        ),
        (vec![b'a'; 70 * 1024], "too big inline request"),
        (
            b"set \"foo bar\r\n".to_vec(),
            "unbalanced quotes in request",
        ),
        (b"*abc\r\n".to_vec(), "invalid multibulk length"),
    ]
}

/// Redis words every protocol error `-ERR Protocol error: ...`; clients
/// (redis-py, hiredis) parse the `ERR` code from the first word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_carry_the_err_prefix() {
    let srv = Server::start().await;
    for (input, why) in malformed_cases() {
        assert_eq!(
            send_until_closed(&srv, &input).await,
            format!("-ERR Protocol error: {why}\r\n"),
            "input {:?}",
            String::from_utf8_lossy(&input[..input.len().min(60)])
        );
    }
    let srv = Server::start_with(|c| c.requirepass = Some("pw".into())).await;
    let eleven: Vec<&str> = std::iter::once("DEL").chain(["k"; 10]).collect();
    assert_eq!(
        send_until_closed(&srv, &encode_words(&eleven)).await,
        "-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_closes_only_that_client() {
    let srv = Server::start().await;
    let mut watcher = srv.client().await;

    // A second client pings the whole time the bad ones run.
    let stop = Arc::new(AtomicBool::new(false));
    let pongs = Arc::new(AtomicU64::new(0));
    let background = {
        let mut con = srv.client().await;
        let (stop, pongs) = (stop.clone(), pongs.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let pong: String = q(&mut con, &["PING"]).await;
                assert_eq!(pong, "PONG");
                pongs.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let mut cases = malformed_cases();
    cases.push((
        b"*1\r\n$3\r\nabcde\r\n".to_vec(),
        "expected CRLF after bulk string",
    ));
    assert_pong(&mut watcher).await;
    for (input, why) in cases {
        protocol_error(&srv, &input, why).await;
        assert_pong(&mut watcher).await;
    }
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(IO_TIMEOUT, background)
        .await
        .expect("pinger finished")
        .expect("pinger never failed");
    assert!(pongs.load(Ordering::Relaxed) > 0);
    assert_pong(&mut watcher).await;
    // Nothing written by the half-decoded SET.
    let x: Option<String> = q(&mut watcher, &["GET", "x"]).await;
    assert_eq!(x, None);
    assert!(
        srv.state()
            .stats
            .counters
            .get(turnstile::metrics::table::PROTOCOL_ERRORS)
            >= 9
    );
}

/// Replies to the good requests before a bad one are still sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_requests_before_a_bad_one_get_their_replies() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    r.send(b"PING\r\n*1\r\n$4\r\nPING\r\n*1\r\n$-10\r\nPING\r\n")
        .await;
    let got = String::from_utf8_lossy(&r.read_until_closed().await).into_owned();
    let (pongs, error) = got.split_at(14);
    assert_eq!(pongs, "+PONG\r\n+PONG\r\n");
    assert!(
        error.starts_with('-') && error.ends_with("Protocol error: invalid bulk length\r\n"),
        "{got:?}"
    );
}

/// A header that never ends (no CR) is refused once it passes 64 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_headers_are_refused() {
    let srv = Server::start().await;
    let mut big = b"*1".to_vec();
    big.extend(std::iter::repeat_n(b'1', 70 * 1024));
    protocol_error(&srv, &big, "too big mbulk count string").await;
    let mut big = b"*1\r\n$1".to_vec();
    big.extend(std::iter::repeat_n(b'1', 70 * 1024));
    protocol_error(&srv, &big, "too big bulk count string").await;
    let mut c = srv.client().await;
    assert_pong(&mut c).await;
}

/// A bulk longer than proto-max-bulk-len is refused as Redis refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proto_max_bulk_len_is_enforced() {
    let srv = Server::start_with(|c| c.proto_max_bulk_len = 1000).await;
    let mut r = srv.raw().await;
    let ok = "v".repeat(1000);
    assert_eq!(r.call(&["SET", "k", &ok]).await, "+OK\r\n");
    protocol_error(
        &srv,
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1001\r\n",
        "invalid bulk length",
    )
    .await;
}

/// A pipeline over a keyspace past the prefetch threshold (where the batch
/// loop looks ahead and hints the store) is answered byte for byte as on
/// a small one: keys present and absent, repeated within one batch, a
/// transaction and key-less commands between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_over_a_large_keyspace_answer_as_over_a_small_one() {
    let big = Server::start().await;
    let store = &big.state().store;
    let now = big.state().clock.now();
    let mut i = 0;
    while !store.prefetching() {
        store.update(format!("filler:{i}").as_bytes(), now, |e| {
            *e = Some(turnstile::store::Entry::new(turnstile::store::Value::Str(
                turnstile::store::SmallBytes::new(b"x"),
            )))
        });
        i += 1;
    }
    let small = Server::start().await;
    let mut pipeline = Vec::new();
    for round in 0..4 {
        for k in 0..12 {
            let key = format!("rl:{}", (k * 5 + round) % 7);
            pipeline.extend(encode_words(&["RL.ALLOW", &key, "10", "60"]));
            pipeline.extend(encode_words(&["INCR", &format!("n:{}", k % 3)]));
        }
        pipeline.extend(encode_words(&["PING"]));
        pipeline.extend(encode_words(&["MULTI"]));
        pipeline.extend(encode_words(&["INCR", "n:1"]));
        pipeline.extend(encode_words(&["GET", "rl:3"]));
        pipeline.extend(encode_words(&["EXEC"]));
        pipeline.extend(encode_words(&["EXISTS", "rl:3", "absent"]));
    }
    pipeline.extend(encode_words(&["ECHO", "end"]));
    let mut answers = Vec::new();
    for srv in [&big, &small] {
        let mut r = srv.raw().await;
        r.send(&pipeline).await;
        let mut got = Vec::new();
        while !got.ends_with(b"$3\r\nend\r\n") {
            got.extend(r.reply().await);
        }
        answers.push(got);
    }
    assert_eq!(
        String::from_utf8_lossy(&answers[0]),
        String::from_utf8_lossy(&answers[1])
    );
}
