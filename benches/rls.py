#!/usr/bin/env python3
"""Policies and Envoy's rate limit service, measured in one run:

- `ShouldRateLimit` over gRPC with one and with three descriptors:
  requests per second, p50/p99/max latency, and the server's CPU per
  request, from `benches/rls_load.rs` (a tonic client on one thread, 64
  calls in flight over 4 HTTP/2 connections, descriptor values random over
  100,000; ghz is not installable here);
- `RL.CHECK bench user <value>` beside `RL.ALLOW` on the same fixed-window
  limit, with redis-benchmark (-c 50 -r 100000, -P 16 and -P 1).

    python3 benches/rls.py [--quick] [--reps N] [--no-build] [--doc]

The server runs with a policy file of one domain, `bench`, whose three
descriptor keys (`user`, `path`, `ip`) each allow 10^9 per second
(envoyproxy/ratelimit's default fixed window): every request is decided,
counted and admitted. Runs alternate test by test; medians of --reps (3)
are reported, with server CPU per request (the sum over its threads of
/proc/<pid>/stat, user + system). `--doc` rewrites the `rls` section of
docs/performance.md.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib

POLICY = """\
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1000000000}
"""


def load_binary():
    return benchlib.cargo_bench_binary("rls_load")


def grpc_run(load, rls_port, pid, descriptors, n):
    before = benchlib.cpu_ns(pid)
    r = subprocess.run([str(load), "--addr", f"127.0.0.1:{rls_port}", "--descriptors", str(descriptors),
                        "--requests", str(n), "--concurrency", "64", "--connections", "4",
                        "--values", "100000"], capture_output=True, text=True, timeout=600)
    after = benchlib.cpu_ns(pid)
    if r.returncode != 0:
        sys.exit(f"rls_load failed:\n{r.stdout}\n{r.stderr}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if out["ok"] != out["requests"]:
        sys.exit(f"rls_load: not every request was OK: {out}")
    return {"ops": out["rps"], "p50": out["p50_us"] / 1000, "p99": out["p99_us"] / 1000,
            "max": out["max_us"] / 1000, "cpu_us": (after - before) / 1000 / out["requests"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few requests, one repetition, no docs written")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-n", type=int, default=200_000, help="requests per run")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--doc", action="store_true", help="rewrite the rls section of docs/performance.md")
    args = ap.parse_args()
    benchlib.require("redis-benchmark", "redis-cli", "cargo")
    if args.quick:
        args.reps, args.n = 1, 20_000
    if not args.no_build:
        benchlib.build_release()
    load = load_binary()
    benchlib.pin_turnstile()
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-rls-bench."))
    (tmp / "bench.yaml").write_text(POLICY)
    rls_port = benchlib.free_port()
    server = benchlib.start_turnstile("--policies", str(tmp / "bench.yaml"), "--rls-port", str(rls_port))
    tests = [
        ("ShouldRateLimit, 1 descriptor", "grpc", 1),
        ("ShouldRateLimit, 3 descriptors", "grpc", 3),
    ]
    for p in (16, 1):
        tests += [
            (f"RL.CHECK, -P {p}", "resp", (["RL.CHECK", "bench", "user", "__rand_int__"], p)),
            (f"RL.ALLOW, -P {p}", "resp",
             (["RL.ALLOW", "rl:{bench}.user___rand_int__", "1000000000", "1s", "ALGO", "fixed"], p)),
        ]
    results = {name: [] for name, *_ in tests}
    try:
        for rep in range(args.reps):
            for name, kind, what in tests:
                if kind == "grpc":
                    r = grpc_run(load, rls_port, server.pid, what, args.n)
                else:
                    cmd, p = what
                    n = args.n * (4 if p > 1 else 1)
                    r = benchlib.redis_benchmark(server.port, server.pid, cmd, n, pipeline=p)
                results[name].append(r)
                print(f"rep {rep + 1} {name}: {r['ops']:,.0f}/s p50 {r['p50']:.3f} ms p99 {r['p99']:.3f} ms "
                      f"CPU {r['cpu_us']:.2f} us", file=sys.stderr)
    finally:
        server.stop()
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in results.items()}
    lines = [f"{benchlib.build_line()}; {benchlib.machine_line()}; medians of {args.reps}", "",
             "| test | requests/s | p50 ms | p99 ms | server CPU/request |", "|---|---|---|---|---|"]
    for name, m in med.items():
        lines.append(f"| {name} | {m['ops']:,.0f} | {m['p50']:.3f} | {m['p99']:.3f} | {m['cpu_us']:.2f} µs |")
    for p in (16, 1):
        c, a = med[f"RL.CHECK, -P {p}"], med[f"RL.ALLOW, -P {p}"]
        lines.append("")
        lines.append(f"RL.CHECK / RL.ALLOW at -P {p}: {c['ops'] / a['ops']:.2f}x the requests/s, "
                     f"{c['cpu_us'] / a['cpu_us']:.2f}x the CPU per request")
    block = "\n".join(lines)
    print(block)
    if args.doc and not args.quick:
        benchlib.write_section(
            "rls", "Policies and the rate limit service",
            "`python3 benches/rls.py --doc`: `ShouldRateLimit` over gRPC (benches/rls_load.rs, a "
            "tonic client on one thread, 64 calls in flight over 4 connections) with one and three "
            "descriptors, and `RL.CHECK` beside `RL.ALLOW` on the same fixed-window limit "
            "(redis-benchmark -c 50 -r 100000). The gRPC client shares the machine's two cores "
            "with the server, as redis-benchmark does.",
            block)


if __name__ == "__main__":
    main()
