//! The native scripts (`cmd/script/native`): each catalogued script, run natively
//! on one server and in Lua on another (`scripts-native no`), step by step
//! over random keys, arguments, odd stored values and clock moves, must
//! answer the same bytes (RESP2 and RESP3) and leave the same keys, types,
//! values and TTLs. Also: the catalogue's SHA1s are its texts', a script
//! one byte off runs in Lua, NOSCRIPT is unchanged, the setting and its
//! INFO counter.

use crate::common::*;
use redis::Value;
use turnstile::cmd::script::native::CATALOGUE;

type Con = redis::aio::MultiplexedConnection;

/// A small deterministic generator (xorshift64*), so a failure names the
/// seed and step that reproduce it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// One server's connections: RESP2 and RESP3 through the `redis` crate,
/// and raw sockets for exact reply bytes in both protocols.
struct Side {
    srv: Server,
    c2: Con,
    c3: Con,
    raw2: Raw,
    raw3: Raw,
}

impl Side {
    async fn start(native: bool) -> Side {
        let srv = Server::start_with(|c| c.scripts_native = native).await;
        let (c2, c3) = (srv.client().await, srv.client3().await);
        let raw2 = srv.raw().await;
        let mut raw3 = srv.raw().await;
        let hello = raw3.call(&["HELLO", "3"]).await;
        assert!(hello.starts_with('%'), "HELLO 3 answered {hello:?}");
        Side {
            srv,
            c2,
            c3,
            raw2,
            raw3,
        }
    }

    /// Runs `args` the way `how` says; the reply as comparable text.
    async fn run(&mut self, how: usize, args: &[&str]) -> String {
        match how {
            0 => show(cmd(args).query_async::<Value>(&mut self.c2).await),
            1 => show(cmd(args).query_async::<Value>(&mut self.c3).await),
            2 => self.raw2.call(args).await,
            _ => self.raw3.call(args).await,
        }
    }

    /// Every key with its type, PTTL and value, sorted.
    async fn dump(&mut self) -> Vec<String> {
        let mut keys: Vec<String> = q(&mut self.c2, &["KEYS", "*"]).await;
        keys.sort();
        let mut out = Vec::new();
        for k in keys {
            let t: String = q(&mut self.c2, &["TYPE", &k]).await;
            let pttl: i64 = q(&mut self.c2, &["PTTL", &k]).await;
            let v: Value = match t.as_str() {
                "string" => q(&mut self.c2, &["GET", &k]).await,
                "zset" => q(&mut self.c2, &["ZRANGE", &k, "0", "-1", "WITHSCORES"]).await,
                "list" => q(&mut self.c2, &["LRANGE", &k, "0", "-1"]).await,
                _ => Value::Nil,
            };
            out.push(format!("{k} {t} {pttl} {v:?}"));
        }
        out
    }

    async fn info_native(&mut self) -> u64 {
        let info: String = q(&mut self.c2, &["INFO", "stats"]).await;
        info.lines()
            .find_map(|l| l.strip_prefix("scripts_native:"))
            .expect("INFO stats has scripts_native")
            .trim()
            .parse()
            .expect("a count")
    }
}

fn show(r: redis::RedisResult<Value>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error: {}", err_text(&e)),
    }
}

/// Arguments each script is given: plain ones mostly, and the odd ones a
/// native path must leave to Lua (floats, words, spaces, hex, exponents,
/// zero, negatives, huge numbers).
const ODD: &[&str] = &[
    "abc",
    "",
    " 5",
    "0x10",
    "1e3",
    "1.5",
    "0",
    "-1",
    "9223372036854775807",
    "-9223372036854775808",
    "inf",
];

/// A `time.time()` as redis-py sends a float (`repr`): the test's clock,
/// `ms` milliseconds after a fixed start, with microseconds and a 17th
/// digit now and then.
fn py_time(ms: u64, rng: &mut Rng, minus: f64) -> String {
    let t = 1_700_000_000.0 + ms as f64 / 1000.0 + rng.below(1000) as f64 / 1e6 - minus;
    match rng.below(4) {
        0 => format!("{}", t.floor()),
        1 => format!("{t:.6}"),
        _ => format!("{t:?}"),
    }
}

fn args_for(name: &str, rng: &mut Rng, ms: u64) -> Vec<String> {
    let odd = |rng: &mut Rng, plain: &[&str]| -> String {
        if rng.chance(12) {
            rng.pick(ODD).to_string()
        } else {
            rng.pick(plain).to_string()
        }
    };
    let mut args = match name {
        n if n.starts_with("limits fixed window") => vec![
            odd(rng, &["1", "2", "10", "60"]),
            odd(rng, &["1", "1", "2", "5", "3"]),
        ],
        "rate-limiter-flexible consume" => vec![
            odd(rng, &["1", "1", "2", "5"]),
            odd(rng, &["1", "2", "10", "60"]),
            "10".into(),
            "60".into(),
        ],
        "rate-limit-redis increment" => vec![odd(rng, &["1000", "2000", "60000", "1"])],
        "rate-limit-redis get" => vec![],
        n if n.starts_with("django-redis incr") => vec![odd(rng, &["1", "2", "-1", "10"])],
        "limits moving window get" => {
            let expiry = [1.0, 2.0, 10.0, 60.0][rng.below(4)];
            vec![
                if rng.chance(12) {
                    rng.pick(ODD).to_string()
                } else {
                    py_time(ms, rng, expiry)
                },
                odd(rng, &["1", "2", "3", "5", "10"]),
            ]
        }
        "limits moving window acquire" => vec![
            if rng.chance(12) {
                rng.pick(ODD).to_string()
            } else {
                py_time(ms, rng, 0.0)
            },
            odd(rng, &["1", "2", "3", "5", "10"]),
            odd(rng, &["1", "2", "10", "60"]),
            odd(rng, &["1", "1", "1", "2", "3"]),
        ],
        "limits sliding window get" => vec![odd(rng, &["1", "2", "10", "60"])],
        "limits sliding window acquire" => vec![
            odd(rng, &["1", "2", "3", "5", "10"]),
            odd(rng, &["1", "2", "10", "60"]),
            odd(rng, &["1", "1", "1", "2", "3"]),
        ],
        other => panic!("no arguments for {other}"),
    };
    // Now and then one argument short (a nil ARGV in the script).
    if !args.is_empty() && rng.chance(4) {
        args.pop();
    }
    args
}

/// Something another client does between two script runs, the same on
/// both servers: a value of another type, a word, a number, an expiry.
async fn noise(rng: &mut Rng, sides: &mut [Side; 2], pool: &[String]) {
    let mut keys: Vec<String> = q(&mut sides[0].c2, &["KEYS", "*"]).await;
    keys.sort();
    keys.extend(pool.iter().cloned());
    let k = keys[rng.below(keys.len())].clone();
    let score = (rng.below(5) as u64 + 1_700_000_000_000_000).to_string();
    let stamp = format!("{}.5", rng.below(100) + 1_700_000_000);
    let ops: [Vec<&str>; 13] = [
        vec!["DEL", &k],
        vec!["DEL", &k],
        vec!["SET", &k, "abc"],
        vec!["SET", &k, "7"],
        vec!["SET", &k, "1.5"],
        vec!["SET", &k, "9223372036854775807"],
        vec!["DEL", &k],
        vec!["ZADD", &k, &score, "m"],
        vec!["LPUSH", &k, "x"],
        vec!["LPUSH", &k, &stamp],
        vec!["RPUSH", &k, "", "1e3"],
        vec!["PEXPIRE", &k, "1500"],
        vec!["PERSIST", &k],
    ];
    let op = &ops[rng.below(ops.len())];
    let a = show(cmd(op).query_async::<Value>(&mut sides[0].c2).await);
    let b = show(cmd(op).query_async::<Value>(&mut sides[1].c2).await);
    assert_eq!(a, b, "noise {op:?}");
    // Odd values pass with time, so most runs meet plain ones.
    if op[0] != "PERSIST" && op[0] != "DEL" {
        for s in sides.iter_mut() {
            let _: Value = q(&mut s.c2, &["PEXPIRE", &k, "3000"]).await;
        }
    }
}

/// The differential run of one catalogued script.
async fn differential(index: usize, seed: u64, steps: usize) {
    let script = &CATALOGUE[index];
    let mut sides = [Side::start(true).await, Side::start(false).await];
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for s in sides.iter_mut() {
        let sha: String = q(&mut s.c2, &["SCRIPT", "LOAD", script.text]).await;
        assert_eq!(sha, script.sha);
    }
    // The get scripts also meet what their acquire script leaves.
    let companion = match script.name {
        "limits moving window get" => Some("limits moving window acquire"),
        "limits sliding window get" => Some("limits sliding window acquire"),
        _ => None,
    }
    .map(|name| {
        CATALOGUE
            .iter()
            .find(|n| n.name == name)
            .expect("catalogued")
    });
    if let Some(other) = companion {
        for s in sides.iter_mut() {
            let _: String = q(&mut s.c2, &["SCRIPT", "LOAD", other.text]).await;
        }
    }
    let two_keys = script.name.starts_with("limits sliding window");
    let pool: Vec<String> = (0..3).map(|i| format!("k{i}")).collect();
    let mut went_native = 0;
    let mut ms = 0u64;
    for step in 0..steps {
        if rng.chance(15) {
            noise(&mut rng, &mut sides, &pool).await;
        }
        let jump = [0, 0, 1, 10, 100, 499, 500, 999, 1000, 1500, 5000, 61_000][rng.below(12)];
        for s in sides.iter() {
            s.srv.advance_ms(jump);
        }
        ms += jump;
        let first = rng.below(pool.len());
        let mut keys = vec![pool[first].clone()];
        if two_keys {
            // Mostly two names, as the library's previous and current.
            let second = if rng.chance(5) {
                first
            } else {
                (first + 1 + rng.below(pool.len() - 1)) % pool.len()
            };
            keys.push(pool[second].clone());
        }
        if let Some(other) = companion.filter(|_| rng.chance(50)) {
            let args = args_for(other.name, &mut rng, ms);
            let n = keys.len().to_string();
            let mut words = vec!["EVALSHA", other.sha, &n];
            words.extend(keys.iter().map(String::as_str));
            words.extend(args.iter().map(String::as_str));
            let how = rng.below(4);
            let a = sides[0].run(how, &words).await;
            let b = sides[1].run(how, &words).await;
            assert_eq!(a, b, "companion {words:?} (seed {seed} step {step})");
        }
        let args = args_for(script.name, &mut rng, ms);
        let numkeys = if rng.chance(3) {
            rng.below(keys.len())
        } else {
            keys.len()
        };
        let body;
        // Now and then read-only: a run that would write goes to Lua.
        let ro = rng.chance(5);
        let mut words: Vec<&str> = if rng.chance(20) {
            body = script.text.to_string();
            vec![if ro { "EVAL_RO" } else { "EVAL" }, &body]
        } else {
            vec![if ro { "EVALSHA_RO" } else { "EVALSHA" }, script.sha]
        };
        let n = numkeys.to_string();
        words.push(&n);
        words.extend(keys.iter().take(numkeys).map(String::as_str));
        words.extend(args.iter().map(String::as_str));
        let how = rng.below(4);
        let before = sides[0].info_native().await;
        let native = sides[0].run(how, &words).await;
        let lua = sides[1].run(how, &words).await;
        went_native += (sides[0].info_native().await - before) as usize;
        let ctx = format!("{} seed {seed} step {step}: {words:?}", script.name);
        assert_eq!(native, lua, "reply of {ctx}");
        let (a, b) = (sides[0].dump().await, sides[1].dump().await);
        assert_eq!(a, b, "store after {ctx}");
    }
    assert_eq!(
        sides[1].info_native().await,
        0,
        "the Lua side ran nothing natively"
    );
    // The commands the scripts ran, counted alike.
    let mut stats = Vec::new();
    for s in sides.iter_mut() {
        let cs: String = q(&mut s.c2, &["INFO", "commandstats"]).await;
        let mut calls: Vec<String> = cs
            .lines()
            // INFO and KEYS: the test asks one side only.
            .filter(|l| {
                l.starts_with("cmdstat_")
                    && !l.starts_with("cmdstat_info:")
                    && !l.starts_with("cmdstat_keys:")
            })
            .filter_map(|l| l.split(",usec").next().map(str::to_string))
            .collect();
        calls.sort();
        stats.push(calls);
    }
    assert_eq!(
        stats[0], stats[1],
        "{} seed {seed}: commandstats",
        script.name
    );
    assert!(
        went_native * 2 > steps,
        "{}: only {went_native} of {steps} runs went native",
        script.name
    );
}

macro_rules! differential_tests {
    ($($test:ident: $name:expr,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let index = CATALOGUE
                .iter()
                .position(|n| n.name == $name)
                .expect("catalogued");
            for seed in 1..=3 {
                differential(index, seed, 150).await;
            }
        }
    )*};
}

differential_tests! {
    same_as_lua_limits_fixed_window: "limits fixed window",
    same_as_lua_rate_limiter_flexible: "rate-limiter-flexible consume",
    same_as_lua_rate_limit_redis_increment: "rate-limit-redis increment",
    same_as_lua_rate_limit_redis_get: "rate-limit-redis get",
    same_as_lua_django_redis_incr: "django-redis incr",
    same_as_lua_django_redis_incr_no_check: "django-redis incr (ignore_key_check)",
    same_as_lua_limits_moving_window_get: "limits moving window get",
    same_as_lua_limits_moving_window_acquire: "limits moving window acquire",
    same_as_lua_limits_sliding_window_get: "limits sliding window get",
    same_as_lua_limits_sliding_window_acquire: "limits sliding window acquire",
}

#[test]
fn catalogue_shas_are_the_texts() {
    let mut seen = std::collections::HashSet::new();
    for n in CATALOGUE {
        let sha = turnstile::script::sha1hex(n.text.as_bytes());
        assert_eq!(std::str::from_utf8(&sha).unwrap(), n.sha, "{}", n.name);
        assert!(seen.insert(n.sha), "{} twice", n.name);
        assert!(!n.library.is_empty() && !n.version.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_byte_off_runs_in_lua() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let fixed = CATALOGUE
        .iter()
        .find(|n| n.name == "limits fixed window")
        .unwrap();
    let native: i64 = q(&mut c, &["EVAL", fixed.text, "1", "a", "60", "2"]).await;
    assert_eq!(native, 2);
    let after_native = native_runs(&mut c).await;
    assert_eq!(after_native, 1);
    // A space more: another SHA1, the same Lua.
    let changed = format!("{} ", fixed.text);
    let lua: i64 = q(&mut c, &["EVAL", &changed, "1", "a", "60", "2"]).await;
    assert_eq!(lua, 4);
    assert_eq!(native_runs(&mut c).await, after_native);
    let info: String = q(&mut c, &["INFO", "stats"]).await;
    let ok: i64 = info
        .lines()
        .find_map(|l: &str| {
            l.strip_prefix("scripts_ok:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    assert_eq!(ok, 2, "both runs count as scripts");
}

async fn native_runs(c: &mut Con) -> u64 {
    info_u64(c, "stats", "scripts_native").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evalsha_of_a_catalogued_script_needs_it_loaded() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let fixed = CATALOGUE
        .iter()
        .find(|n| n.name == "limits fixed window")
        .unwrap();
    let e = q_err(&mut c, &["EVALSHA", fixed.sha, "1", "a", "60", "1"]).await;
    assert_eq!(e, "NOSCRIPT No matching script. Please use EVAL.");
    assert_eq!(native_runs(&mut c).await, 0);
    let _: String = q(&mut c, &["SCRIPT", "LOAD", fixed.text]).await;
    let n: i64 = q(&mut c, &["EVALSHA", fixed.sha, "1", "a", "60", "1"]).await;
    assert_eq!(n, 1);
    let _: String = q(&mut c, &["SCRIPT", "FLUSH"]).await;
    let e = q_err(&mut c, &["EVALSHA", fixed.sha, "1", "a", "60", "1"]).await;
    assert_eq!(e, "NOSCRIPT No matching script. Please use EVAL.");
    assert_eq!(native_runs(&mut c).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setting_turns_it_off_and_on() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let got: Vec<String> = q(&mut c, &["CONFIG", "GET", "scripts-native"]).await;
    assert_eq!(got, ["scripts-native", "yes"]);
    let fixed = CATALOGUE
        .iter()
        .find(|n| n.name == "limits fixed window")
        .unwrap();
    let _: i64 = q(&mut c, &["EVAL", fixed.text, "1", "a", "60", "1"]).await;
    assert_eq!(native_runs(&mut c).await, 1);
    let _: () = q(&mut c, &["CONFIG", "SET", "scripts-native", "no"]).await;
    let n: i64 = q(&mut c, &["EVAL", fixed.text, "1", "a", "60", "1"]).await;
    assert_eq!(n, 2);
    assert_eq!(native_runs(&mut c).await, 1);
    let _: () = q(&mut c, &["CONFIG", "SET", "scripts-native", "yes"]).await;
    let n: i64 = q(&mut c, &["EVAL", fixed.text, "1", "a", "60", "1"]).await;
    assert_eq!(n, 3);
    assert_eq!(native_runs(&mut c).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_transaction_and_as_eval_ro() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let fixed = CATALOGUE
        .iter()
        .find(|n| n.name == "limits fixed window")
        .unwrap();
    let _: String = q(&mut c, &["SCRIPT", "LOAD", fixed.text]).await;
    let _: () = q(&mut c, &["MULTI"]).await;
    let _: String = q(&mut c, &["EVALSHA", fixed.sha, "1", "t", "60", "5"]).await;
    let _: String = q(&mut c, &["EVALSHA", fixed.sha, "1", "t", "60", "5"]).await;
    let got: Vec<i64> = q(&mut c, &["EXEC"]).await;
    assert_eq!(got, [5, 10]);
    assert_eq!(native_runs(&mut c).await, 2);
    let pttl: i64 = q(&mut c, &["PTTL", "t"]).await;
    assert_eq!(pttl, 60_000);
    // A read-only run refuses the write, in Lua's words.
    let e = q_err(&mut c, &["EVALSHA_RO", fixed.sha, "1", "t", "60", "5"]).await;
    assert!(
        e.starts_with("ERR Write commands are not allowed from read-only scripts."),
        "{e}"
    );
    assert_eq!(native_runs(&mut c).await, 2);
    let cs: String = q(&mut c, &["INFO", "commandstats"]).await;
    assert!(cs.contains("cmdstat_incrby:calls=2,"), "{cs}");
    assert!(cs.contains("cmdstat_expire:calls=1,"), "{cs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_get_scripts_run_natively_until_they_would_write() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let by = |name: &str| CATALOGUE.iter().find(|n| n.name == name).unwrap();
    let (get, acquire) = (
        by("limits moving window get"),
        by("limits moving window acquire"),
    );
    for s in [get, acquire] {
        let _: String = q(&mut c, &["SCRIPT", "LOAD", s.text]).await;
    }
    let ok: i64 = q(
        &mut c,
        &["EVALSHA", acquire.sha, "1", "m", "100.5", "2", "10", "1"],
    )
    .await;
    assert_eq!(ok, 1);
    let got: Vec<Value> = q(&mut c, &["EVALSHA_RO", get.sha, "1", "m", "95", "2"]).await;
    assert_eq!(got, [Value::BulkString(b"100.5".to_vec()), Value::Int(1)]);
    assert_eq!(native_runs(&mut c).await, 2);
    // The acquire script writes: read-only, it runs in Lua, which refuses.
    let e = q_err(
        &mut c,
        &["EVALSHA_RO", acquire.sha, "1", "m", "101", "2", "10", "1"],
    )
    .await;
    assert!(e.starts_with("ERR Write commands are not allowed"), "{e}");
    assert_eq!(native_runs(&mut c).await, 2);

    // The sliding window's get writes only when it shifts the window.
    let (get, acquire) = (
        by("limits sliding window get"),
        by("limits sliding window acquire"),
    );
    for s in [get, acquire] {
        let _: String = q(&mut c, &["SCRIPT", "LOAD", s.text]).await;
    }
    let ok: i64 = q(
        &mut c,
        &["EVALSHA", acquire.sha, "2", "p", "n", "5", "10", "1"],
    )
    .await;
    assert_eq!(ok, 1);
    let got: Vec<Value> = q(&mut c, &["EVALSHA_RO", get.sha, "2", "p", "n", "10"]).await;
    assert_eq!(got[2], Value::BulkString(b"1".to_vec()));
    assert_eq!(got[3], Value::Int(20_000));
    assert_eq!(native_runs(&mut c).await, 4);
    srv.advance_ms(10_500);
    let e = q_err(&mut c, &["EVALSHA_RO", get.sha, "2", "p", "n", "10"]).await;
    assert!(e.starts_with("ERR Write commands are not allowed"), "{e}");
    assert_eq!(native_runs(&mut c).await, 4);
    let got: Vec<Value> = q(&mut c, &["EVALSHA", get.sha, "2", "p", "n", "10"]).await;
    assert_eq!(got[0], Value::BulkString(b"1".to_vec()));
    assert_eq!(got[2], Value::BulkString(b"0".to_vec()));
    assert_eq!(native_runs(&mut c).await, 5);
    let cs: String = q(&mut c, &["INFO", "commandstats"]).await;
    assert!(cs.contains("cmdstat_rename:calls=1,"), "{cs}");
    assert!(cs.contains("cmdstat_lindex:calls="), "{cs}");
}

/// The benchmarks' limiters (`benches/lua/`), which measure the general
/// Lua path, are this project's own texts and outside the catalogue: they
/// run in the VM and, with their keys built inside the script, limit as
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_benchmarks_scripts_are_not_catalogued_and_limit_in_lua() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/lua");
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["two_bucket.lua", "zset_log.lua"]);
    let srv = Server::start().await;
    let mut c = srv.client().await;
    // Limit 2 a minute: two admitted (the remaining count, or the count
    // before), the third denied.
    for (file, want) in [
        ("two_bucket.lua", ["[1, 1]", "[1, 0]", "[0, 0]"]),
        ("zset_log.lua", ["[1, 0]", "[1, 1]", "[0, 2]"]),
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let sha = turnstile::script::sha1hex(text.as_bytes());
        let sha = std::str::from_utf8(&sha).unwrap();
        assert!(
            turnstile::cmd::script::native::find(sha).is_none(),
            "{file} is catalogued"
        );
        let loaded: String = q(&mut c, &["SCRIPT", "LOAD", &text]).await;
        assert_eq!(loaded, sha);
        let mut run = Vec::new();
        for _ in 0..3 {
            // The log's member is the server's TIME: one per call.
            srv.advance_ms(1);
            let got: Vec<i64> = q(&mut c, &["EVALSHA", sha, "1", file, "2", "60"]).await;
            run.push(format!("{got:?}"));
        }
        assert_eq!(run, want, "{file}");
    }
    assert_eq!(native_runs(&mut c).await, 0);
    let zcard: i64 = q(&mut c, &["ZCARD", "zset_log.lua"]).await;
    assert_eq!(zcard, 2);
    let keys: Vec<String> = q(&mut c, &["KEYS", "two_bucket.lua:*"]).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
}
