//! Lua scripts through the whole server (`Harness`): the engine's sandbox,
//! its conversions both ways, the four libraries Redis loads (`cjson`,
//! `cmsgpack`, `struct`, `bit`) fed bytes they must refuse cleanly, and
//! `redis.call` into every command family, data types included.
//!
//! The input is read (with `arbitrary`'s `Unstructured`) as a sequence of
//! operations: a script built from statement fragments (each picked by a
//! byte, its numbers and strings from the input), run by `EVAL`, `EVAL_RO`
//! or `EVALSHA` after `SCRIPT LOAD`; a data-type command; `SCRIPT FLUSH`;
//! a clock move. Loops in fragments are bounded (`for` with at most 64
//! turns, two deep), so no script runs away: a hang is a bug.
//!
//! Asserts: no panic (the server's or Lua's: a Rust panic inside a Lua
//! callback would abort); every request gets a reply; after a script that
//! raised, the next `PING` still answers `+PONG` (the VM is usable).

#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use turnstile::harness::{encode_request, Harness};
use turnstile::Nanos;

const START: u64 = 1_700_000_000 * Nanos::PER_SEC;

const KEYS: [&str; 4] = ["k", "l", "z", "h"];

fn number(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => "0".into(),
        1 => "-1".into(),
        2 => i64::from(u.arbitrary::<i32>()?).to_string(),
        3 => u.arbitrary::<i64>()?.to_string(),
        4 => format!("{}.5", u.arbitrary::<i16>()?),
        5 => "1e308".into(),
        6 => "(0/0)".into(),
        _ => u.int_in_range(0u16..=300)?.to_string(),
    })
}

/// A Lua string literal of input bytes (escaped, so any byte goes).
fn string(u: &mut Unstructured<'_>) -> Result<String> {
    let len = u.int_in_range(0usize..=24)?;
    let mut s = String::from("\"");
    for _ in 0..len {
        s.push_str(&format!("\\{}", u.arbitrary::<u8>()?));
    }
    s.push('"');
    Ok(s)
}

fn value(u: &mut Unstructured<'_>, depth: u8) -> Result<String> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => number(u)?,
        1 => string(u)?,
        2 => "nil".into(),
        3 => "true".into(),
        4 => "false".into(),
        5 if depth < 3 => {
            let n = u.int_in_range(0usize..=4)?;
            let items: Result<Vec<String>> = (0..n).map(|_| value(u, depth + 1)).collect();
            format!("{{{}}}", items?.join(","))
        }
        6 => format!("{{ok={}}}", string(u)?),
        7 => format!("{{err={}}}", string(u)?),
        8 if depth < 3 => format!("{{map={{a={}}}}}", value(u, depth + 1)?),
        _ => format!("{{double={}}}", number(u)?),
    })
}

const COMMANDS: &[&str] = &[
    "GET", "SET", "INCR", "INCRBY", "DEL", "EXISTS", "EXPIRE", "PTTL", "TYPE", "LPUSH", "RPUSH",
    "LPOP", "RPOP", "LRANGE", "LINDEX", "LTRIM", "LREM", "LLEN", "ZADD", "ZREM", "ZCARD", "ZCOUNT",
    "ZSCORE", "ZINCRBY", "ZRANGE", "ZRANGEBYSCORE", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "HSET",
    "HGET", "HDEL", "HINCRBY", "HINCRBYFLOAT", "HGETALL", "HMGET", "RL.ALLOW", "RL.PEEK",
    "CL.THROTTLE", "TIME", "PING", "NOSUCH", "EVAL", "MULTI",
];

const WORDS: &[&str] = &[
    "0", "1", "-1", "10", "60", "+inf", "-inf", "(1", "WITHSCORES", "BYSCORE", "REV", "LIMIT", "NX",
    "XX", "GT", "LT", "CH", "INCR", "PX", "EX", "ALGO", "log", "gcra", "f", "m",
];

/// `redis.call`/`pcall` with a command and arguments from the input.
fn call(u: &mut Unstructured<'_>) -> Result<String> {
    let f = if u.arbitrary()? { "redis.pcall" } else { "redis.call" };
    let mut args = vec![format!("'{}'", u.choose(COMMANDS)?)];
    args.push(format!("'{}'", u.choose(&KEYS)?));
    for _ in 0..u.int_in_range(0usize..=5)? {
        args.push(match u.int_in_range(0u8..=2)? {
            0 => format!("'{}'", u.choose(WORDS)?),
            1 => number(u)?,
            _ => string(u)?,
        });
    }
    Ok(format!("{f}({})", args.join(",")))
}

fn statement(u: &mut Unstructured<'_>, depth: u8) -> Result<String> {
    Ok(match u.int_in_range(0u8..=15)? {
        0..=3 => format!("local r = {}", call(u)?),
        4 => format!("local j = cjson.encode({})", value(u, 0)?),
        5 => format!("pcall(cjson.decode, {})", string(u)?),
        6 => format!("pcall(cmsgpack.unpack, {})", string(u)?),
        7 => format!("local m = cmsgpack.unpack(cmsgpack.pack({}))", value(u, 0)?),
        8 => format!(
            "pcall(struct.unpack, {}, {})",
            u.choose(&["'>I2'", "'<i4'", "'b'", "'s'", "'c0'", "'>d'", "'!4i'"])?,
            string(u)?
        ),
        9 => format!(
            "local b = bit.{}({}, {})",
            u.choose(&["band", "bor", "bxor", "lshift", "rshift", "arshift", "rol", "ror"])?,
            number(u)?,
            number(u)?
        ),
        10 if depth < 2 => {
            let turns = u.int_in_range(1u8..=64)?;
            format!("for i = 1, {turns} do {} end", statement(u, depth + 1)?)
        }
        11 => format!("redis.setresp({})", u.choose(&["2", "3"])?),
        12 => format!("pcall(error, {})", value(u, 0)?),
        13 => format!("local s = redis.sha1hex({})", string(u)?),
        14 => format!("local t = {{{}}}", value(u, 0)?),
        _ => format!("pcall(function() return {} end)", call(u)?),
    })
}

fn script(u: &mut Unstructured<'_>) -> Result<String> {
    let n = u.int_in_range(1usize..=6)?;
    let body: Result<Vec<String>> = (0..n).map(|_| statement(u, 0)).collect();
    let ret = if u.arbitrary()? {
        value(u, 0)?
    } else {
        call(u)?
    };
    Ok(format!("{} return {ret}", body?.join(" ")))
}

fn run(h: &mut Harness, args: &[&[u8]]) -> Vec<u8> {
    let reply = h.feed(&encode_request(args));
    assert!(!reply.is_empty() || h.is_closed(), "no reply to {args:?}");
    reply
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut h = Harness::new(Nanos(START));
    let _ = (|| -> Result<()> {
        for _ in 0..u.int_in_range(1usize..=8)? {
            match u.int_in_range(0u8..=9)? {
                0..=4 => {
                    let text = script(&mut u)?;
                    let cmd: &[u8] = u.choose(&[&b"EVAL"[..], b"EVAL_RO"])?;
                    let key = u.choose(&KEYS)?.as_bytes();
                    let reply = run(&mut h, &[cmd, text.as_bytes(), b"1", key, b"7"]);
                    if reply.starts_with(b"-") {
                        assert_eq!(run(&mut h, &[b"PING"]), b"+PONG\r\n");
                    }
                }
                5 => {
                    let text = script(&mut u)?;
                    let sha = run(&mut h, &[b"SCRIPT", b"LOAD", text.as_bytes()]);
                    if let Some(sha) = sha.strip_prefix(b"$40\r\n") {
                        run(&mut h, &[b"EVALSHA", &sha[..40], b"0"]);
                    }
                }
                6 => {
                    let cmd = u.choose(COMMANDS)?.as_bytes();
                    let key = u.choose(&KEYS)?.as_bytes();
                    let mut args: Vec<Vec<u8>> = vec![cmd.to_vec(), key.to_vec()];
                    for _ in 0..u.int_in_range(0usize..=4)? {
                        args.push(u.choose(WORDS)?.as_bytes().to_vec());
                    }
                    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                    run(&mut h, &refs);
                }
                7 => {
                    run(&mut h, &[b"SCRIPT", b"FLUSH"]);
                }
                8 => {
                    // A raw script body: the compiler must refuse what it
                    // cannot compile, and never loop (no loop survives
                    // without `while`/`repeat`/`goto`, which are refused).
                    let len = u.int_in_range(0usize..=64)?;
                    let body: &[u8] = u.bytes(len)?;
                    let text = String::from_utf8_lossy(body);
                    if !["while", "repeat", "for", "function", "goto"]
                        .iter()
                        .any(|w| text.contains(w))
                    {
                        run(&mut h, &[b"EVAL", body, b"0"]);
                    }
                }
                _ => {
                    let ms = u.int_in_range(0u64..=120_000)?;
                    h.clock.advance(std::time::Duration::from_millis(ms));
                }
            }
        }
        Ok(())
    })();
});
