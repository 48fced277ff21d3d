//! Every command's argument parser and handler, through one in-process
//! server (`Harness`), on a sequence of structured commands and clock moves.
//!
//! The input is decoded (with `arbitrary`'s `Unstructured`, one byte at a
//! time so `fuzz/gen_seeds.py` can write seeds) into a script of operations:
//!
//! ```text
//! op byte o < 0xC0    a command of 1 + (o & 15) arguments; each argument is
//!                     a selector byte s:
//!                       s < 0xF8   a dictionary word: argument 0 from NAMES
//!                                  (every command in the table, plus a few
//!                                  unknown ones), the others from VALUES
//!                                  (numbers at and past the i64 bounds,
//!                                  durations, ALGO names, option keywords,
//!                                  subcommands, config names, keys)
//!                       0xF8..FD   a literal: length byte n, then n bytes
//!                       0xFE       a long key: 'k' repeated 256 B .. 1 MiB
//!                       0xFF       a number: 8 bytes, as a decimal i64
//! 0xC0 <= o < 0xE0    advance the clock by ADVANCE[o & 31]
//! 0xE0 <= o < 0xF0    set the clock to SET[o & 15] (backwards, too)
//! 0xF0 <= o           set the clock to 8 bytes (u64, below 2^63)
//! ```
//!
//! Each command is sent as a RESP array to one `Harness` (one connection,
//! one keyspace). Asserts: no panic, overflow included (cargo fuzz builds
//! with debug assertions); every request gets a reply unless the
//! connection was closed.
//!
//! Transactions are checked against a model: a second `Harness` gets every
//! command the first runs outside `MULTI`, so both hold the same keyspace,
//! but never `MULTI` itself; when the first's `EXEC` runs its queue, the
//! model runs the same commands one by one, and `EXEC`'s reply must be
//! exactly the array of the model's replies (when every queued command's
//! reply is a function of the keyspace and the clock: not `KEYS`, `SCAN`,
//! `INFO`, `CLIENT`, `HELLO`, whose order or content differ between two
//! servers).

#![no_main]

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use turnstile::cmd::registry::table::COMMANDS;
use turnstile::harness::{encode_request, Harness};
use turnstile::{Clock, Nanos};

const START: u64 = 1_700_000_000 * Nanos::PER_SEC;
/// The clock never goes past i64::MAX ns (year 2262): replies carry times as
/// signed 64-bit integers, and the system clock cannot get there either.
const CLOCK_MAX: u64 = i64::MAX as u64;

const S: u64 = Nanos::PER_SEC;
const ADVANCE: [u64; 32] = [
    0,
    1,
    999,
    1_000,
    1_000_000,
    999_999,
    250_000_000,
    S - 1,
    S,
    S + 1,
    2 * S,
    10 * S,
    59 * S,
    60 * S,
    61 * S,
    120 * S,
    900 * S,
    3_600 * S,
    86_400 * S,
    6 * 86_400 * S,
    7 * 86_400 * S,
    365 * 86_400 * S,
    100 * 365 * 86_400 * S,
    1 << 40,
    1 << 50,
    1 << 60,
    1 << 62,
    CLOCK_MAX,
    3 * S / 2,
    500_000,
    12_345_678_901,
    u64::MAX,
];
const SET: [u64; 16] = [
    0,
    1,
    S,
    START,
    START - 1,
    START + 1,
    START - 3_600 * S,
    START + 86_400 * S,
    START - 86_400 * S,
    START - 1_000,
    4_102_444_800 * S, // 2100-01-01
    1 << 62,
    CLOCK_MAX - S,
    CLOCK_MAX - 1,
    CLOCK_MAX,
    1 << 32,
];

/// Command names: every command in the table, a few in other cases, and
/// unknown ones.
static NAMES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut names: Vec<Vec<u8>> = COMMANDS
        .iter()
        // Commands that stop or sleep the process are not for fuzzing.
        .filter(|c| !matches!(c.name, "shutdown" | "debug"))
        .map(|c| c.name.as_bytes().to_vec())
        .collect();
    for extra in [
        "RL.ALLOW", "RL.PEEK", "RL.ALLOWMANY", "CL.THROTTLE", "Rl.Allow", "nope", "",
        "rl.allo", "rl.allowmanyx",
    ] {
        names.push(extra.as_bytes().to_vec());
    }
    names
});

/// Argument values.
static VALUES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut v: Vec<Vec<u8>> = [
        // integers
        "0", "1", "2", "3", "5", "10", "15", "30", "60", "100", "1000", "16777215",
        "16777216", "-1", "-2", "-100", "4294967296", "4611686018427387904",
        "9223372036854775806", "9223372036854775807", "9223372036854775808",
        "-9223372036854775807", "-9223372036854775808", "-9223372036854775809",
        "18446744073709551615", "18446744073709551616", "99999999999999999999999",
        "00", "01", "+1", " 1", "1 ", "0x10", "1.5", "1e9", "-0", "abc",
        // floats (INCRBYFLOAT), and GETEX's PERSIST
        "PERSIST", "0.1", "-0.0", "1e17", "1.5e-10", "5.0e3", "0x1.8p1", "inf", "-inf", "nan",
        "1e4932", "-1.18973149535723176502e+4932", "0x1p-16445", "1e-5000",
        // durations
        "250ms", "1ms", "999ms", "1000ms", "1s", "10s", "59s", "60s", "15m", "1h", "1d", "6d",
        "7d", "1D", "1MS", "0ms", "0s", "-1s", "1.5s", "10 s", "10w", "s", "ms", "1e9s",
        "99999999999d", "106751d", "106752d", "2562047h", "2562048h", "153722867m",
        "153722868m", "9223372036s", "9223372037s", "9223372036854ms", "9223372036855ms",
        "18446744073709551615ms", "552959d", "553000d",
        // algorithms
        "window", "log", "gcra", "fixed", "WINDOW", "Log", "GCRA", "nope",
        // limiter options
        "ALGO", "COST", "BURST", "PRECISION", "LIMIT", "algo", "cost", "limit",
        // other options and words
        "EX", "PX", "EXAT", "PXAT", "NX", "XX", "GT", "LT", "KEEPTTL", "GET", "MATCH",
        "COUNT", "TYPE", "AUTH", "SETNAME", "ASYNC", "SYNC", "ID", "ADDR", "LADDR", "USER",
        "SKIPME", "MAXAGE", "yes", "no", "default", "normal", "string", "rl-window",
        "rl-log", "rl-gcra", "rl-fixed", "lib-name", "lib-ver", "*", "?", "[a-", "\\",
        "k*", "*k*", "h[ae]llo", "[^a]", "{k}", "{}", "{", "server", "clients", "memory",
        "stats", "keyspace", "everything", "all",
        // config names
        "maxclients", "maxmemory", "maxmemory-policy", "timeout", "requirepass",
        "proto-max-bulk-len", "protected-mode", "port", "bind", "save", "appendonly",
        "client-query-buffer-limit", "databases", "noeviction", "volatile-ttl", "*max*",
        // keys
        "k", "k2", "key", "user:42", "ip:10.0.0.2", "{a}x", "{a}y", "", " ", "\0",
        "\r\n", "secret",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    // Subcommand words, from the table.
    for c in COMMANDS {
        for sub in c.subcommands {
            v.push(sub.name.as_bytes().to_vec());
        }
        v.push(c.name.as_bytes().to_vec());
    }
    v
});

enum Op {
    Command(Vec<Vec<u8>>),
    Advance(u64),
    Set(u64),
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Command(args) => {
                let mut l = f.debug_list();
                for a in args {
                    if a.len() > 64 {
                        l.entry(&format_args!("<{} bytes of {:?}>", a.len(), a[0] as char));
                    } else {
                        l.entry(&String::from_utf8_lossy(a));
                    }
                }
                l.finish()
            }
            Op::Advance(d) => write!(f, "advance {d} ns"),
            Op::Set(t) => write!(f, "set clock to {t} ns"),
        }
    }
}

#[derive(Debug)]
struct Script(Vec<Op>);

fn byte(u: &mut Unstructured<'_>) -> Result<u8> {
    u8::arbitrary(u)
}

fn argument(u: &mut Unstructured<'_>, first: bool) -> Result<Vec<u8>> {
    let s = byte(u)?;
    Ok(match s {
        0..=0xF7 => {
            let dict: &[Vec<u8>] = if first { &NAMES } else { &VALUES };
            dict[s as usize % dict.len()].clone()
        }
        0xF8..=0xFD => {
            let n = byte(u)? as usize;
            let n = n.min(u.len());
            u.bytes(n)?.to_vec()
        }
        0xFE => {
            let len = [256, 4096, 16 * 1024 + 1, 65_536, 1 << 20][byte(u)? as usize % 5];
            vec![b'k'; len]
        }
        0xFF => {
            let mut b = [0u8; 8];
            for x in &mut b {
                *x = byte(u)?;
            }
            i64::from_le_bytes(b).to_string().into_bytes()
        }
    })
}

impl<'a> Arbitrary<'a> for Script {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < 256 {
            let o = byte(u)?;
            ops.push(match o {
                0..=0xBF => {
                    let argc = 1 + (o & 15) as usize;
                    let mut args = Vec::with_capacity(argc);
                    for i in 0..argc {
                        args.push(argument(u, i == 0)?);
                    }
                    Op::Command(args)
                }
                0xC0..=0xDF => Op::Advance(ADVANCE[(o & 31) as usize]),
                0xE0..=0xEF => Op::Set(SET[(o & 15) as usize]),
                0xF0..=0xFF => {
                    let mut b = [0u8; 8];
                    for x in &mut b {
                        *x = byte(u)?;
                    }
                    Op::Set(u64::from_le_bytes(b) & CLOCK_MAX)
                }
            });
        }
        Ok(Script(ops))
    }
}

/// Commands whose replies two servers with the same keys may word
/// differently (hash order, counters, connection facts).
const NOT_COMPARED: [&str; 7] = ["keys", "scan", "info", "client", "hello", "lastsave", "command"];

/// Commands that put the connection in the subscriber's context, where
/// only a few commands are accepted from a client (but not from a queue
/// `EXEC` runs).
const SUBSCRIBING: [&str; 3] = ["subscribe", "psubscribe", "ssubscribe"];

fn name_of(args: &[Vec<u8>]) -> String {
    String::from_utf8_lossy(&args[0]).to_ascii_lowercase()
}

/// A null array in RESP2 or RESP3, or an error: EXEC ran nothing.
fn ran_nothing(reply: &[u8]) -> bool {
    reply == b"*-1\r\n" || reply == b"_\r\n" || reply.starts_with(b"-")
}

fuzz_target!(|script: Script| {
    let mut h = Harness::new(Nanos(START));
    let mut model = Harness::new(Nanos(START));
    // Commands `h` has queued since its MULTI, when it is in one.
    let mut queue: Option<Vec<&Vec<Vec<u8>>>> = None;
    for op in &script.0 {
        match op {
            Op::Command(args) => {
                if h.is_closed() {
                    break;
                }
                let reply = h.feed(&encode_request(args));
                assert!(
                    !reply.is_empty() || h.is_closed(),
                    "no reply to {op:?}"
                );
                let name = name_of(args);
                let Some(q) = &mut queue else {
                    if name == "multi" && reply == b"+OK\r\n" {
                        queue = Some(Vec::new());
                    } else {
                        model.feed(&encode_request(args));
                    }
                    continue;
                };
                // EXEC and DISCARD end every WATCH, whatever ran; the
                // model, which saw the WATCH but sees neither, must too
                // (else a later transaction it runs aborts on a key only
                // it still watches). Ending it first changes nothing the
                // model then runs: the queue alone reads no WATCH, and a
                // transaction `h` ran had no touched key on either side.
                if name == "exec" || name == "discard" {
                    model.feed(&encode_request(&[b"UNWATCH"]));
                }
                match name.as_str() {
                    "exec" => {
                        let q = queue.take().expect("in MULTI");
                        if ran_nothing(&reply) {
                            continue;
                        }
                        // After a SUBSCRIBE inside EXEC the rest of the
                        // queue still runs, as in Redis; run alone, the
                        // model would refuse them in the subscriber's
                        // context. The model runs the same transaction.
                        let (want, how) = if q
                            .iter()
                            .any(|c| SUBSCRIBING.contains(&name_of(c).as_str()))
                        {
                            model.feed(&encode_request(&[b"MULTI"]));
                            for queued in &q {
                                model.feed(&encode_request(queued));
                            }
                            let want = model.feed(&encode_request(&[b"EXEC"]));
                            (want, "the same EXEC on a second server")
                        } else {
                            let mut want = format!("*{}\r\n", q.len()).into_bytes();
                            for queued in &q {
                                want.extend(model.feed(&encode_request(queued)));
                            }
                            (want, "running it alone")
                        };
                        let compared = q
                            .iter()
                            .all(|c| !NOT_COMPARED.contains(&name_of(c).as_str()));
                        if compared {
                            assert_eq!(
                                String::from_utf8_lossy(&reply),
                                String::from_utf8_lossy(&want),
                                "EXEC of {q:?} differs from {how}"
                            );
                        }
                    }
                    "discard" => queue = None,
                    "reset" => {
                        queue = None;
                        model.feed(&encode_request(args));
                    }
                    _ if reply == b"+QUEUED\r\n" => q.push(args),
                    _ => {}
                }
            }
            Op::Advance(d) => {
                let now = h.clock.now().0;
                let d = (*d).min(CLOCK_MAX - now.min(CLOCK_MAX));
                h.clock.advance(Duration::from_nanos(d));
                model.clock.advance(Duration::from_nanos(d));
            }
            Op::Set(t) => {
                h.clock.set(Nanos(*t));
                model.clock.set(Nanos(*t));
            }
        }
    }
});
