//! One compiled cluster client for `benches/cluster_move.py --rust-client`:
//! one request after another to random keys through the `redis` crate's
//! cluster client (it follows MOVED and ASK, and reloads its slot map in
//! the background after a MOVED, as Lettuce and go-redis do), each
//! request's start and latency kept, until its standard input closes; then
//! one line per request on standard output. A Python client's own pauses
//! (its interpreter, its lock, its slot-map reload: 4-7 ms of its CPU) are
//! as long as the worst a move costs a server, so the worst latency it
//! sees follows the client; this one costs microseconds a request.
//!
//! ```text
//! cargo bench --bench cluster_probe -- --port 15001 --kind turnstile --keys 50000
//! ```
//!
//! Output, after a `ready` line once connected: `start_ns latency_ns ok`
//! per request, `start_ns` on `CLOCK_MONOTONIC` (Python's
//! `time.perf_counter` on Linux), `ok` 0 for an error, whose text follows.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `CLOCK_MONOTONIC` in nanoseconds: the clock the harness reads too, so
/// that each request can be placed inside or outside the move.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Args {
    port: u16,
    /// `INCR key` (Redis's limiter) rather than `RL.ALLOW key 100 1h`.
    redis: bool,
    keys: u64,
}

/// A bad argument: said on standard error, exit status 2.
fn usage(what: &str) -> ! {
    eprintln!(
        "cluster_probe: {what}\nusage: cluster_probe --port PORT --kind turnstile|redis --keys N"
    );
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args {
        port: 15001,
        redis: false,
        keys: 100_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` adds `--bench`.
        if flag == "--bench" {
            continue;
        }
        let Some(value) = it.next() else {
            usage(&format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--port" => match value.parse() {
                Ok(p) if p > 0 => a.port = p,
                _ => usage(&format!("--port must be 1-65535, not {value:?}")),
            },
            "--kind" => match value.as_str() {
                "turnstile" => a.redis = false,
                "redis" => a.redis = true,
                _ => usage(&format!("--kind must be turnstile or redis, not {value:?}")),
            },
            "--keys" => match value.parse() {
                Ok(n) if n > 0 => a.keys = n,
                _ => usage(&format!("--keys must be 1 to 2^64 - 1, not {value:?}")),
            },
            other => usage(&format!("unknown flag {other:?}")),
        }
    }
    a
}

fn main() {
    let a = args();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        for _ in std::io::stdin().lock().lines() {}
        flag.store(true, Ordering::Relaxed);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = rt.block_on(async move {
        let client =
            redis::cluster::ClusterClient::new(vec![format!("redis://127.0.0.1:{}/", a.port)])
                .expect("client");
        let mut conn = match client.get_async_connection().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "cluster_probe: cannot reach the cluster at 127.0.0.1:{} (it sends no password): {e}",
                    a.port
                );
                std::process::exit(1)
            }
        };
        println!("ready");
        std::io::stdout().flush().ok();
        // xorshift64: the keys need only be spread, not unpredictable.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut done: Vec<(u64, u64, Option<String>)> = Vec::with_capacity(1 << 16);
        let mut key = String::with_capacity(16);
        while !stop.load(Ordering::Relaxed) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            key.clear();
            use std::fmt::Write as _;
            let _ = write!(key, "k:{}", x % a.keys);
            let mut cmd = redis::cmd(if a.redis { "INCR" } else { "RL.ALLOW" });
            cmd.arg(&key);
            if !a.redis {
                cmd.arg(100).arg("1h");
            }
            let t = monotonic_ns();
            let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
            let took = monotonic_ns() - t;
            done.push((t, took, r.err().map(|e| e.to_string())));
        }
        done
    });
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    for (t, took, err) in out {
        match err {
            None => writeln!(w, "{t} {took} 1"),
            // One line per request: an error's CR, LF or other control
            // character would end it early (Python reads CR as a line end).
            Some(e) => writeln!(
                w,
                "{t} {took} 0 {}",
                e.replace(|c: char| c.is_control(), " ")
            ),
        }
        .expect("stdout");
    }
}
