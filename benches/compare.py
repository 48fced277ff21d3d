#!/usr/bin/env python3
"""Side-by-side benchmark: Turnstile against Redis running the seeds' Lua
limiters, with redis-benchmark, on this machine, in one run.

    benches/compare.sh            # full run, writes docs/performance.md
    benches/compare.sh --quick    # smoke run for CI: checks it completes

Starts `target/release/turnstile` twice (as shipped: a worker thread per
core but one, so one on a 2-core machine, one core as Redis uses; and
with a worker per core, `--threads` the core count) and Debian's
`redis-server` (--save '' --appendonly no) on free loopback ports, loads the Lua limiters into
both (benches/lua/: the two-bucket sliding-window counter and the sorted-set
log, this project's own texts, which Turnstile runs in its Lua VM, the
general path any script takes; and the `limits` library's fixed window,
which its native catalogue runs in Rust; all called with EVALSHA), and runs
`redis-benchmark -c 50 -r 100000` against both, each test `--reps` times,
without and with `-P 16`, then the baseline, `RL.ALLOW window` and the
general-path scripts again without pipelining at `-c 500`.
Every server's keyspace is emptied (`FLUSHALL`) before each test: the
Turnstile instance runs tests Redis does not (the limiter commands), and
without that it would carry their keys (about 800,000, expiring as later
tests run) into the script tests Redis runs on a keyspace of its own.
For every run it records ops/s, p50 and p99 (redis-benchmark's CSV), and the
server's CPU time per operation (the sum over its threads of
/proc/<pid>/stat, user + system before and after, divided by operations):
redis-benchmark itself takes about one of this machine's two cores, so CPU
per operation is the steadier figure. Prints one markdown table of medians
and ratios, and (unless --quick) writes it to docs/performance.md.
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone

from benchlib import require, die_with_parent, ROOT, free_port, redis_benchmark, wait_ping

# The limiter scripts, each measured once, named by the path Turnstile
# runs it on:
# - benches/lua/: the classic two-bucket sliding-window counter (two
#   string keys per limiter, built in the script, estimate interpolated)
#   and the classic sorted-set sliding-window log (one member per
#   request), both on the server's TIME. This project's own texts, so
#   outside the native catalogue (tests/it/native_scripts.rs checks it):
#   Turnstile runs them in its Lua VM, as any application's own script;
# - the Python `limits` library's fixed-window script (limits 5.8.0,
#   incr_expire.lua, its exact text, the catalogue's copy in
#   src/cmd/script/native/lua/), the one Flask-Limiter runs on every
#   request by default: Turnstile runs it natively.
BENCH_LUA = ROOT / "benches/lua"
NATIVE_LUA = ROOT / "src/cmd/script/native/lua"

# name, script, EVALSHA arguments after the SHA (numkeys, key, args).
GENERAL_SCRIPTS = [
    ("two-bucket, general path", (BENCH_LUA / "two_bucket.lua").read_text(), ["1", "tb:__rand_int__", "100", "60"]),
    ("zset log, general path", (BENCH_LUA / "zset_log.lua").read_text(), ["1", "zl:__rand_int__", "100", "60"]),
]
NATIVE_SCRIPTS = [
    ("limits fixed window, native", (NATIVE_LUA / "limits_incr_expire.lua").read_text(),
     ["1", "lf:__rand_int__", "60", "1"]),
]
SCRIPTS = GENERAL_SCRIPTS + NATIVE_SCRIPTS

# Workers of the second Turnstile: one per core.
PER_CORE = os.cpu_count() or 1

# Connections of the extra pass without pipelining (a fleet's many
# clients), over the tests marked `wide`.
WIDE_CLIENTS = 500


def flushall(port):
    r = subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True, text=True, timeout=60)
    if r.stdout.strip() != "OK":
        sys.exit(f"FLUSHALL on port {port} answered {r.stdout!r} {r.stderr!r}")


def bench(port, pid, args, n, pipeline, clients=50):
    return redis_benchmark(port, pid, args, n, pipeline, clients=clients, randomkeys=100000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="few requests, one repetition, no docs written")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("-n", type=int, default=200_000, help="requests per run without pipelining")
    ap.add_argument("--pipelined-n", type=int, default=1_000_000, help="requests per run with -P 16")
    ap.add_argument("--no-build", action="store_true")
    opts = ap.parse_args()
    require("cargo", "redis-server", "redis-benchmark")
    if opts.quick:
        opts.reps, opts.n, opts.pipelined_n = 1, 2_000, 20_000

    if not opts.no_build:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    tport, pcport, rport = free_port(), free_port(), free_port()
    turnstile = subprocess.Popen(
        [str(ROOT / "target/release/turnstile"), "--port", str(tport), "--metrics-addr", "127.0.0.1:0", "--log-level", "warn"],
        stdout=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # never left running, however this ends
    )
    # The same binary with a worker per core (the default until
    # 2026-11-27), to show what the default leaves out.
    turnstile_pc = subprocess.Popen(
        [str(ROOT / "target/release/turnstile"), "--port", str(pcport), "--metrics-addr", "127.0.0.1:0",
         "--log-level", "warn", "--threads", str(PER_CORE)],
        stdout=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # never left running, however this ends
    )
    redis = subprocess.Popen(
        ["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # never left running, however this ends
    )
    try:
        wait_ping(tport, turnstile, "turnstile")
        wait_ping(pcport, turnstile_pc, f"turnstile --threads {PER_CORE}")
        wait_ping(rport, redis, "redis-server")
        sha = {}
        for name, script, _ in SCRIPTS:
            for port in (rport, tport):
                r = subprocess.run(["redis-cli", "-p", str(port), "SCRIPT", "LOAD", script],
                                   capture_output=True, text=True, check=True)
                got = r.stdout.strip()
                if len(got) != 40 or sha.setdefault(name, got) != got:
                    sys.exit(f"SCRIPT LOAD of {name} on port {port} answered {got!r}")
        version_text = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
        redis_version = next((w[2:] for w in version_text.split() if w.startswith("v=")), version_text.strip())

        tests = [
            ("Turnstile", tport, turnstile.pid, "PING_MBULK", ["-t", "ping_mbulk"]),
            ("Redis", rport, redis.pid, "PING_MBULK", ["-t", "ping_mbulk"]),
            ("Turnstile", tport, turnstile.pid, "INCR", ["-t", "incr"]),
            ("Redis", rport, redis.pid, "INCR", ["-t", "incr"]),
        ]
        for algo in ["window", "log", "gcra", "fixed"]:
            # A key prefix per algorithm: a key holds one kind of state.
            tests.append(("Turnstile", tport, turnstile.pid, f"RL.ALLOW {algo}",
                          ["RL.ALLOW", f"{algo}:__rand_int__", "100", "60", "ALGO", algo]))
        tests += [
            ("Turnstile", tport, turnstile.pid, "CL.THROTTLE", ["CL.THROTTLE", "cell:__rand_int__", "99", "100", "60"]),
            ("Turnstile", tport, turnstile.pid, "RL.ALLOWMANY (2 limits)",
             ["RL.ALLOWMANY", "LIMIT", "ip:__rand_int__", "100", "60", "LIMIT", "user:__rand_int__", "1000", "1h", "ALGO", "fixed"]),
        ]
        for name, _, args in SCRIPTS:
            for server, port, pid in (("Redis", rport, redis.pid), ("Turnstile", tport, turnstile.pid)):
                tests.append((server, port, pid, f"Lua {name} (EVALSHA)", ["EVALSHA", sha[name], *args]))
        per_core = f"Turnstile {PER_CORE} threads"
        tests += [
            (per_core, pcport, turnstile_pc.pid, "PING_MBULK", ["-t", "ping_mbulk"]),
            (per_core, pcport, turnstile_pc.pid, "INCR", ["-t", "incr"]),
        ]
        for algo in ["window", "log", "gcra", "fixed"]:
            tests.append((per_core, pcport, turnstile_pc.pid, f"RL.ALLOW {algo}",
                          ["RL.ALLOW", f"{algo}:__rand_int__", "100", "60", "ALGO", algo]))
        tests.append((per_core, pcport, turnstile_pc.pid, "CL.THROTTLE", ["CL.THROTTLE", "cell:__rand_int__", "99", "100", "60"]))
        # The wide pass: what a fleet's many connections cost, without
        # pipelining, for the baseline, one decision and the general path.
        wide_names = {"PING_MBULK", "INCR", "RL.ALLOW window"} | {f"Lua {n} (EVALSHA)" for n, _, _ in GENERAL_SCRIPTS}
        wide = [t for t in tests if t[3] in wide_names]
        passes = [(1, 50, opts.n, tests), (16, 50, opts.pipelined_n, tests), (1, WIDE_CLIENTS, opts.n, wide)]
        results = {}
        for rep in range(opts.reps):
            for pipeline, clients, n, run in passes:
                for server, port, pid, name, args in run:
                    for p in (tport, pcport, rport):
                        flushall(p)
                    res = bench(port, pid, args, n, pipeline, clients)
                    results.setdefault((pipeline, clients, server, name), []).append(res)
                    print(f"rep {rep + 1} -P {pipeline:2} -c {clients:3} {server:9} {name:28} {res['ops']:>11.0f} ops/s "
                          f"p50 {res['p50']:.3f} p99 {res['p99']:.3f} ms  {res['cpu_us']:.2f} us CPU/op", file=sys.stderr)
    finally:
        for p in (turnstile, turnstile_pc, redis):
            p.terminate()
        for p in (turnstile, turnstile_pc, redis):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    med = {k: {f: statistics.median(r[f] for r in v) for f in ("ops", "p50", "p99", "cpu_us")} for k, v in results.items()}
    lines = []
    for pipeline, clients, _, run in passes:
        def m(server, name):
            return med[(pipeline, clients, server, name)]
        ran = {name for _, _, _, name, _ in run}
        incr = m("Redis", "INCR")
        lua = [m("Redis", f"Lua {n} (EVALSHA)")["ops"] for n, _, _ in GENERAL_SCRIPTS if f"Lua {n} (EVALSHA)" in ran]
        scripts = [(n, m("Turnstile", f"Lua {n} (EVALSHA)"), m("Redis", f"Lua {n} (EVALSHA)"))
                   for n, _, _ in SCRIPTS if f"Lua {n} (EVALSHA)" in ran]
        ping = {s: m(s, "PING_MBULK")["ops"] for s in ("Turnstile", per_core)}
        title = (f"no pipelining, {clients} connections" if pipeline == 1 else f"-P {pipeline}, {clients} connections")
        lines += [
            f"### {title}",
            "",
            "| server | test | ops/s | p50 ms | p99 ms | server CPU us/op | ops/s vs Redis INCR | ops/s vs best Redis Lua | ops/s vs own PING_MBULK | CPU/op vs Redis INCR |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for server, _, _, name, _ in run:
            r = m(server, name)
            limiter = server != "Redis" and name not in ("PING_MBULK", "INCR")
            vs_lua = f"{r['ops'] / max(lua):.2f}x" if lua else ""
            lines.append(
                f"| {server} | {name} | {r['ops']:,.0f} | {r['p50']:.3f} | {r['p99']:.3f} | {r['cpu_us']:.2f} | "
                f"{r['ops'] / incr['ops']:.2f}x | "
                + (f"{vs_lua} | {r['ops'] / ping[server]:.2f}x | {r['cpu_us'] / incr['cpu_us']:.2f}x |" if limiter else "| | |")
            )
        lines += [
            "",
            "The same Lua scripts, Turnstile against Redis (the \"general path\" ones run in Turnstile's Lua VM, "
            "the \"native\" one in Rust):",
            "",
            "| script | Turnstile ops/s | Redis ops/s | ops/s ratio | Turnstile CPU us/op | Redis CPU us/op | CPU ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, t, r in scripts:
            lines.append(f"| {n} | {t['ops']:,.0f} | {r['ops']:,.0f} | {t['ops'] / r['ops']:.2f}x | "
                         f"{t['cpu_us']:.2f} | {r['cpu_us']:.2f} | {t['cpu_us'] / r['cpu_us']:.2f}x |")
        lines.append("")
    table = "\n".join(lines)
    print(table)
    if opts.quick:
        return
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
    doc = ROOT / "docs/performance.md"
    text = doc.read_text() if doc.exists() else "# Performance\n"
    start, end = "<!-- compare:start -->", "<!-- compare:end -->"
    block = "\n".join([
        start,
        f"Measured {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} on {os.cpu_count()} cores ({cpu}), "
        f"{platform.system()} {platform.release()}, Redis {redis_version}, by `benches/compare.sh` "
        f"(`redis-benchmark -c 50 -r 100000 --csv`, -n {opts.n} without and {opts.pipelined_n} with `-P 16`; "
        f"a subset again without pipelining at `-c {WIDE_CLIENTS}`; "
        f"medians of {opts.reps} runs per test, servers alternated, every keyspace emptied before each test).",
        "",
        table,
        end,
    ])
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)
    print(f"wrote {doc}", file=sys.stderr)


if __name__ == "__main__":
    main()
